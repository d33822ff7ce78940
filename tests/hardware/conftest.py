"""Every hardware test starts from fresh cores, the default profile and default settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from torchneuron.hardware import core, settings


@pytest.fixture(autouse=True)
def fresh_hardware() -> Iterator[None]:
    saved_values = dict(settings._values)
    saved_profile = settings._profile
    core.reset()
    yield
    core.reset()
    settings._values.clear()
    settings._values.update(saved_values)
    settings._profile = saved_profile

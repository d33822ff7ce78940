"""Fixtures for adaptive-eager tests: a fresh runtime and fresh simulated cores per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import torchneuron.adaptive_eager as ae
from torchneuron.hardware import reset as reset_cores


@pytest.fixture(autouse=True)
def fresh_adaptive() -> Iterator[None]:
    ae.disable()
    ae.reset()
    reset_cores()
    yield
    ae.disable()
    ae.reset()

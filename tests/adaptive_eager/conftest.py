"""Fixtures for adaptive-eager tests: a fresh runtime and fresh simulated cores per test,
and verification on (TORCHNEURON_VERIFY): each region's first replay is also run eagerly
and compared, so a wrong executable is caught as ``verify-mismatch`` (a failure) even
where a test compares only some of a loop's results."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import torchneuron
import torchneuron.adaptive_eager as ae
from torchneuron.hardware.settings import override


@pytest.fixture(autouse=True)
def fresh_adaptive() -> Iterator[None]:
    ae.disable()
    torchneuron.reset()  # every layer: adaptive eager's regions, counters, fresh cores
    with override(verify=True):
        yield
    mismatches = ae.stats()["fallback_reasons"].get("verify-mismatch", 0)
    explained = ae.explain()
    ae.disable()
    ae.reset()
    if mismatches:
        pytest.fail(f"a replayed region differed from eager (verify-mismatch):\n{explained}")

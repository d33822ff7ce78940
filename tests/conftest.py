"""Test-wide setup: zero modeled compile latency, then register the neuron device.

Why ``setdefault`` before the import: the hardware settings read the environment on
first use, and an eager NEFF compile charged on every new op signature would make
simulated-time assertions depend on which tests ran first. ``make test`` already
exports ``TORCHNEURON_COMPILE_LATENCY=0``; this makes a bare ``pytest`` behave the
same, while an explicit setting in the environment still wins.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")
# ``from tests import models`` (the shared model zoo) works under bare ``pytest`` too.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

import torchneuron  # noqa: E402, F401  (registers the device)
from torchneuron.dispatch import reset_op_tracking  # noqa: E402
from torchneuron.hardware import reset as reset_cores  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_op_tracking() -> Iterator[None]:
    """Each test sees only its own ops in ``executed_ops()`` / ``fallback_ops()``."""
    reset_op_tracking()
    yield


@pytest.fixture
def fresh_cores() -> Iterator[None]:
    """Fresh simulated cores (clock at 0, no compiled signatures) for timing tests.

    Opt-in rather than autouse: a test module may keep neuron tensors alive across
    tests; their memory is released on the core that counted it either way.
    """
    reset_cores()
    yield
    reset_cores()

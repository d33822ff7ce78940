"""Test-wide setup: zero modeled compile latency, a private compile cache, then the device.

Why ``setdefault`` before the import: the hardware settings read the environment on
first use, and an eager NEFF compile charged on every new op signature would make
simulated-time assertions depend on which tests ran first. ``make test`` already
exports ``TORCHNEURON_COMPILE_LATENCY=0``; this makes a bare ``pytest`` behave the
same, while an explicit setting in the environment still wins.
"""

from __future__ import annotations

import atexit
import gc
import itertools
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")
# Never the user's compile cache: a per-session folder (subprocesses inherit it), and a
# fresh subfolder per test (fixture below), so no test sees another's executables.
_CACHE_ROOT = tempfile.mkdtemp(prefix="torchneuron-test-cache-")
os.environ["TORCHNEURON_CACHE_DIR"] = _CACHE_ROOT
atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)
_test_ids = itertools.count()
# ``from tests import models`` (the shared model zoo) works under bare ``pytest`` too.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

import torchneuron  # noqa: E402, F401  (registers the device)
from torchneuron.dispatch import reset_op_tracking  # noqa: E402
from torchneuron.hardware import reset as reset_cores  # noqa: E402
from torchneuron.hardware import settings  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _imported_objects_frozen() -> Iterator[None]:
    """The objects of the imports (torch, Dynamo, the compiler: about 400,000) leave the
    garbage collector's generations for the session. Every full collection walked them
    all (0.2 to 0.5 s each, several per test that compiles; ``gc.collect()`` in the memory
    tests); they live as long as their modules do, so nothing the tests make is kept
    longer: a test's own garbage is collected as before."""
    import functorch.compile  # noqa: F401  (every worker compiles: what its first compile
    import torch._dynamo  # noqa: F401  # imports, imported here to be frozen too)
    import torch._functorch.partitioners  # noqa: F401
    import torch_mlir.fx  # noqa: F401

    import torchneuron.compiler  # noqa: F401

    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def _fresh_op_tracking() -> Iterator[None]:
    """Each test sees only its own ops in ``executed_ops()`` / ``fallback_ops()``."""
    reset_op_tracking()
    yield


@pytest.fixture(autouse=True)
def _fx_tracing_flag_clear() -> Iterator[None]:
    """FX's process-wide "tracing" flag is clear after every test: a test that leaves it
    set fails here, by name, instead of every later ``torch.compile`` in the run."""
    yield
    import torch.fx._symbolic_trace as fx_symbolic_trace

    if fx_symbolic_trace._is_fx_tracing_flag:
        fx_symbolic_trace._is_fx_tracing_flag = False
        pytest.fail("this test left FX's tracing flag set (two traces overlapped?)")


@pytest.fixture(autouse=True)
def _own_compile_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test compiles into an empty cache of its own (the default store follows, and so
    do processes the test starts). A cache hit skips the modeled compile latency, so two
    processes of one test comparing simulated times with compile latency on should set
    ``TORCHNEURON_CACHE=0``."""
    folder = os.path.join(_CACHE_ROOT, f"t{next(_test_ids)}")
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", folder)
    with settings.override(cache_dir=folder):
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

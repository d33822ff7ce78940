"""worker: lowering in a persistent child process; crashes become WorkerCrash."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

pytest.importorskip("torch_mlir")

from torchneuron.compiler.errors import LoweringError, WorkerCrash, WorkerTimeout  # noqa: E402
from torchneuron.compiler.lower import worker  # noqa: E402
from torchneuron.compiler.prepare.graph import prepare  # noqa: E402

HERE = __name__  # the worker imports this module by name (pytest puts its folder on sys.path)


def segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def pid() -> int:
    return os.getpid()


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_lower_in_worker_returns_stablehlo() -> None:
    w = torch.randn(8, 3)
    pg = prepare(lambda x: torch.relu(x @ w) + torch.tensor([1.0, 2.0, 3.0]), [torch.randn(4, 8)])
    text = worker.lower_in_worker(pg.gm)
    assert "stablehlo.dot_general" in text


def test_errors_from_the_worker_keep_their_fields() -> None:
    pg = prepare(lambda x: torch.igamma(x, x), [torch.rand(3)])
    with pytest.raises(LoweringError) as info:
        worker.lower_in_worker(pg.gm)
    assert info.value.op == "aten.igamma" and info.value.stage == "lower"


def test_segfault_raises_worker_crash_and_next_call_works() -> None:
    first = worker.run_in_worker(f"{HERE}:pid")
    assert first != os.getpid()
    with pytest.raises(WorkerCrash) as info:
        worker.run_in_worker(f"{HERE}:segfault")
    assert info.value.reason == "worker-crashed" and "signal 11" in str(info.value)
    second = worker.run_in_worker(f"{HERE}:pid")
    assert second not in (first, os.getpid())
    assert worker.run_in_worker(f"{HERE}:pid") == second  # warm worker is reused


def test_timeout_kills_and_recovers() -> None:
    with pytest.raises(WorkerTimeout):
        worker.run_in_worker(f"{HERE}:nap", 30, timeout=0.5)
    assert worker.run_in_worker(f"{HERE}:nap", 0) == 0


def test_in_process_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert worker.run_in_worker(f"{HERE}:pid", in_process=True) == os.getpid()
    monkeypatch.setenv("TORCHNEURON_COMPILE_IN_PROCESS", "1")
    assert worker.run_in_worker(f"{HERE}:pid") == os.getpid()

"""Failed compiles are remembered: a later process does not compile the graph again.

Neuron's compile cache keeps failed compiles, and so does ours: a graph whose compile
failed for a reason of its own (an op with no lowering) is recorded under its index key
(a ``failure`` entry: stage, reason, op, message), and ``compile_graph`` raises the same
error at once in any later process, without preparing or lowering the graph. Before,
every warm run compiled each failing adaptive-eager region again (seconds of real time,
and the simulated compiler's queue) and never got to the regions around the refused op.
``TORCHNEURON_CACHE_RETRY_FAILED=1`` compiles it again; a crashed or timed-out worker is
not remembered (the machine's failure, not the graph's); a tampered record is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torchneuron.adaptive_eager as ae
from torchneuron.cache import CacheStore, cli, reset_default_store
from torchneuron.compiler import CompileError, compile_graph, pipeline
from torchneuron.compiler.errors import WorkerCrash
from torchneuron.compiler.keys import index_key
from torchneuron.hardware import current_profile
from torchneuron.hardware.settings import override


def _igamma(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.igamma(a, x * 2)  # no lowering in this Torch-MLIR


def _inputs() -> list[torch.Tensor]:
    return [torch.rand(4) + 0.5, torch.rand(4)]


def _compile(root: Path) -> CompileError:
    with pytest.raises(CompileError) as info:
        compile_graph(_igamma, _inputs(), store=CacheStore(root), graph_key="igamma-graph")
    return info.value


def test_a_failed_compile_is_raised_again_without_compiling(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    first = _compile(tmp_path)
    assert (first.stage, first.reason, first.op) == ("lower", "no-lowering", "aten.igamma")

    def no_prepare(*args: object, **kwargs: object) -> None:
        raise AssertionError("the graph was prepared again")

    monkeypatch.setattr(pipeline, "prepare", no_prepare)
    again = _compile(tmp_path)  # a new store on the same folder: a later process
    assert (again.stage, again.reason, again.op) == (first.stage, first.reason, first.op)
    assert type(again) is type(first) and "remembers" in str(again)
    assert cli.main(["--dir", str(tmp_path), "verify"]) == 0
    monkeypatch.undo()
    with override(cache_retry_failed=True):  # compiled (and failing) again
        retried = _compile(tmp_path)
    assert "remembers" not in str(retried) and retried.reason == "no-lowering"


def test_a_crashed_worker_is_not_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    from torchneuron.compiler.lower import worker

    def crash(*args: object, **kwargs: object) -> None:
        raise WorkerCrash("the worker died", reason="worker-crashed")

    monkeypatch.setattr(worker, "run_in_worker", crash)
    with pytest.raises(WorkerCrash):
        compile_graph(_igamma, _inputs(), store=CacheStore(tmp_path), graph_key="g")
    ikey = index_key("g", current_profile().name, {})
    assert CacheStore(tmp_path).failure(ikey) is None


def test_a_tampered_failure_record_is_refused_and_removed(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    key = index_key("g", current_profile().name, {})
    store.disk.write("failure", key, b'{"stage": "lower", "code": "import os"}', {})
    with pytest.warns(UserWarning, match="removed bad entry"):
        assert CacheStore(tmp_path).failure(key) is None
    assert not store.disk.exists("failure", key)


def _loop(steps: int = 8) -> list[float]:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4).to("neuron")
    a = (torch.rand(4) + 0.5).to("neuron")
    losses = []
    for _ in range(steps):
        y = torch.nn.functional.softplus(lin(a)) + 0.1
        loss = (torch.igamma(a, y.detach()) + y).sum()
        loss.backward()
        with torch.no_grad():
            lin.weight -= 0.01 * lin.weight.grad
        lin.weight.grad = None
        losses.append(loss.item())
    return losses


def test_adaptive_eager_refuses_a_remembered_region_at_once(tmp_path: Path) -> None:
    runs, losses = [], []
    with override(cache=True, cache_dir=str(tmp_path), compile_latency=False,
                  ae_first_tier=False):
        for _ in range(2):  # two runs, each with a fresh runtime and store: two processes
            reset_default_store()
            ae.reset()
            with ae.enabled():
                losses.append(_loop())
                runs.append(ae.stats())
    reset_default_store()
    assert losses[0] == losses[1]
    first, second = runs
    assert first["compile_failures"] == 1 and first["compilations"] >= 2, first
    # the region holding igamma is refused from the cache, not compiled again; the
    # regions around igamma come from the cache too
    assert second["compile_failures"] == 1 and second["compilations"] == 0, second
    assert second["cache_hits"] >= 1 and second["refused_ops"] == first["refused_ops"]

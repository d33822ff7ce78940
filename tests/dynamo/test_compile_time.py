"""Simulated time of compiled work, from the cost model's own numbers.

A compiled forward+backward of the small transformer must take less simulated
time than the same step run eagerly, and the compiled programs' reports must say
why: fewer launches than ops, and HBM traffic removed by fusion.
"""

from __future__ import annotations

import copy

import pytest
import torch

import torchneuron.compiler as tc
from tests import models
from torchneuron.compiler import Executable

pytestmark = pytest.mark.slow


def _step_ms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    models.loss("tiny_lm", model(x), y).backward()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def test_compiled_transformer_step_beats_eager(fresh_cores: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    compiled_programs: list[Executable] = []
    original = tc.pipeline.compile_graph

    def keep(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        exe = original(*args, **kwargs)
        compiled_programs.append(exe)
        return exe

    import torchneuron.dynamo.backend as backend

    torch._dynamo.reset()  # graphs of an earlier TinyLM would be reused, not recompiled
    monkeypatch.setattr(backend, "compile_graph", keep)
    base = models.build("tiny_lm")
    eager, compiled = copy.deepcopy(base).to("neuron"), copy.deepcopy(base).to("neuron")
    step = torch.compile(compiled, backend="neuron")
    x, y = (t.to("neuron") for t in models.batch("tiny_lm"))
    for _ in range(2):  # warm: eager signatures seen, graphs compiled
        eager_ms = _step_ms(eager, x, y)
        compiled_ms = _step_ms(step, x, y)
    assert compiled_ms < eager_ms, (compiled_ms, eager_ms)

    assert len(compiled_programs) == 2  # forward and backward
    for exe in compiled_programs:
        cost = exe.program["cost"]
        assert exe.num_kernels < exe.signature["num_stablehlo_ops"]
        report = exe.report()
        assert "fusion saved" in report and "launches" in report
        fused = cost["hbm_read_bytes"] + cost["hbm_write_bytes"]
        op_by_op = cost["eager_hbm_read_bytes"] + cost["eager_hbm_write_bytes"]
        assert 0 < fused < op_by_op


def test_a_compiled_function_charges_the_core_after_a_hardware_reset() -> None:
    """``torchneuron.hardware.reset()`` forgets every core; a function compiled before it
    charges its launches to the new core (it charged the forgotten one: the new run's
    simulated time and launch count missed every compiled call)."""
    from torchneuron import hardware

    fn = torch.compile(lambda a: (a * 2 + 1).relu(), backend="neuron")
    x = torch.randn(64, device="neuron")
    fn(x)
    hardware.reset()
    before = hardware.get_core(0).stats()["executable_launches"]
    fn(torch.randn(64, device="neuron"))
    assert hardware.get_core(0).stats()["executable_launches"] == before + 1

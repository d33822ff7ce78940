"""neuronc fuses and costs a call of eager's own kernel (decomp/eager_kernels.py) as the
op it stands for, not as an opaque kernel of its own: gelu stays a matmul's epilogue on
the activation engine, log_softmax is a reduction."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torchneuron.compiler import compile_graph


def test_a_call_fuses_and_costs_as_the_op_it_stands_for() -> None:
    """gelu of a matmul is one kernel (the matmul's epilogue), whose gelu runs on the
    activation engine; a lone log_softmax is a reduction kernel."""
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    exe = compile_graph(lambda x, w: F.gelu(x @ w) * 2, [x, w], name="gelu_mm")
    [kernel] = exe.program["kernels"]
    assert "aten.gelu.default" in kernel["name"] and "scalar" in kernel["engines"], kernel
    exe = compile_graph(lambda x: F.log_softmax(x, -1), [x], name="log_softmax")
    [kernel] = exe.program["kernels"]
    assert kernel["kind"] == "reduce" and kernel["cost"]["engine_ns"]["scalar"] > 0, kernel

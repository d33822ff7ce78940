"""Eager's bits depend on the CPU's code path: ``hardtanh_backward`` (relu6 / hardtanh
gradients, at NaN) runs eager's own kernel inside the program (decomp/eager_kernels.py),
bfloat16 batch norm in training is refused (decomp/refusals/cpu_dependent.py) and runs
eagerly. Both give eager's bits under torch.compile; before, the compiled gradient at
NaN and the bfloat16 outputs differed.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import NAN, bits_equal, torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph

aten = torch.ops.aten


def test_eager_hardtanh_backward_at_nan_depends_on_the_position() -> None:
    """Why no lowering can give its bits: the same NaN gets a zero gradient in eager's
    vectorised loop and the gradient itself in its scalar tail."""
    x = torch.full((70,), NAN, dtype=torch.float64)
    g = aten.hardtanh_backward(torch.ones(70, dtype=torch.float64), x, 0.0, 6.0)
    assert g[0] == 0 and g[-1] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu6_gradient_at_nan_gives_eagers_bits(dtype: torch.dtype) -> None:
    x = torch.tensor([NAN, -1.0, 0.0, 3.0, 6.0, 7.0, NAN, 0.5, 1.0], dtype=dtype)
    torch_compile_matches_eager(lambda t: F.relu6(t) * 2, x, grad=True)
    torch_compile_matches_eager(lambda t: F.hardtanh(t, -0.5, 0.5), x, grad=True)
    x = torch.full((70,), NAN, dtype=dtype)  # a vector body and a scalar tail
    g = torch.ones(70, dtype=dtype)
    [got] = compile_graph(lambda gr, t: aten.hardtanh_backward(gr, t, 0.0, 6.0), [g, x]).run([g, x])
    bits_equal(got, aten.hardtanh_backward(g, x, 0.0, 6.0))


@pytest.mark.parametrize("params", ["bfloat16", "float32", "none"])
def test_bfloat16_training_batch_norm_gives_eagers_bits(params: str) -> None:
    x = (torch.arange(4 * 3 * 25, dtype=torch.float32).reshape(4, 3, 5, 5).sin() * 100
         ).bfloat16()
    dt = torch.bfloat16 if params == "bfloat16" else torch.float32
    w, b = torch.linspace(-2, 2, 3, dtype=dt), torch.linspace(-1, 3, 3, dtype=dt)
    rm, rv = torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt)

    def fn(t: torch.Tensor, m: torch.Tensor, v: torch.Tensor, *wb: torch.Tensor):
        return F.batch_norm(t, m, v, *wb, training=True)

    extra = [] if params == "none" else [w, b]
    with pytest.raises(CompileError) as info:
        compile_graph(fn, [x, rm.clone(), rv.clone(), *extra])
    assert info.value.reason == "batch-norm-bfloat16"
    torch._dynamo.reset()
    cpu = [rm.clone(), rv.clone()]
    dev = [t.to("neuron") for t in cpu]
    want = fn(x, *cpu, *extra)
    got = torch.compile(fn, backend="neuron")(x.to("neuron"), *dev,
                                             *[t.to("neuron") for t in extra])
    bits_equal(got.cpu(), want)
    for d, c in zip(dev, cpu, strict=True):  # running statistics
        bits_equal(d.cpu(), c)


def test_bfloat16_eval_batch_norm_still_compiles() -> None:
    x = torch.randn(4, 3, 5, 5).bfloat16()
    rm, rv = torch.zeros(3), torch.ones(3)
    compile_graph(lambda t, m, v: F.batch_norm(t, m, v, training=False), [x, rm, rv])

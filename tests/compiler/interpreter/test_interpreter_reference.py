"""Differential test: our interpreter vs StableHLO's own reference interpreter.

torch-mlir ships the official StableHLO interpreter (``_stablehlo.eval_module``). Where
eager PyTorch and our numbers disagree, this tells an interpreter bug (we differ from
the reference) from a lowering bug (we match the reference; torch-mlir lowered the
graph wrongly). The reference runs in a subprocess: it aborts the process on ops it
does not support.
"""

from __future__ import annotations

import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.func import grad

from torchneuron.compiler.interpreter import interpret
from torchneuron.compiler.stablehlo import parse_module

g = torch.Generator().manual_seed(1)


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def _mlp(w1, w2, x):
    return grad(lambda w1, w2: torch.tanh(x @ w1).relu().matmul(w2).pow(2).mean(), argnums=(0, 1))(
        w1, w2
    )


CASES = [
    ("remainder_mixed_signs", torch.remainder, [r(8) * 5, r(8)]),  # torch-mlir lowers to fmod
    ("take", lambda x, i: torch.take(x, i), [r(3, 4), torch.tensor([0, 5, 11])]),
    (
        "int_division",
        lambda a, b: (torch.div(a, b, rounding_mode="trunc"), a // b),
        [torch.tensor([-7, 7, -9, 9]), torch.tensor([2, -2, 4, 4])],
    ),
    ("argmax_sort_topk", lambda x: (x.argmax(1), *torch.sort(x, 1), *torch.topk(x, 2)), [r(3, 7)]),
    ("cumsum", lambda x: torch.cumsum(x, 1), [r(3, 9)]),
    (
        "conv_transpose_pool",
        lambda x, w: F.max_pool2d(F.conv_transpose2d(x, w, stride=2), 3, 2, 1),
        [r(1, 2, 4, 4), r(2, 3, 3, 3)],
    ),
    (
        "gather_scatter",
        lambda x, i, v: (torch.gather(x, 1, i), x.index_put((i[:, 0],), v, accumulate=True)),
        [r(4, 5), torch.tensor([[1, 2], [3, 0], [1, 1], [0, 4]]), r(4, 5)],
    ),
    ("layernorm_pad", lambda x: F.pad(F.layer_norm(x, (6,)), (1, 2), value=-1.0), [r(3, 6)]),
    ("mlp_backward", _mlp, [r(4, 8), r(8, 2), r(5, 4)]),
]

_REFERENCE = """
import sys, torch, numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo as shlo
cases = torch.load(sys.argv[1])
results = []
for text, inputs in cases:
    ctx = ir.Context()
    shlo.register_dialect(ctx)
    with ctx:
        m = ir.Module.parse(text.replace("arith.constant", "stablehlo.constant"))
        args = [ir.DenseElementsAttr.get(np.ascontiguousarray(x.numpy())) for x in inputs]
        results.append([torch.from_numpy(np.array(o).copy()) for o in shlo.eval_module(m, args)])
torch.save(results, sys.argv[2])
"""


def test_matches_stablehlo_reference_interpreter(lower, tmp_path) -> None:
    texts = [lower(fn, inputs) for _, fn, inputs in CASES]
    src, dst = tmp_path / "cases.pt", tmp_path / "ref.pt"
    torch.save([(t, inputs) for t, (_, _, inputs) in zip(texts, CASES, strict=True)], src)
    proc = subprocess.run(
        [sys.executable, "-c", _REFERENCE, str(src), str(dst)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    reference = torch.load(dst)
    for (name, _, inputs), text, want in zip(CASES, texts, reference, strict=True):
        got = interpret(parse_module(text), inputs)
        assert len(got) == len(want), name
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            b = b.reshape(a.shape).to(a.dtype)
            torch.testing.assert_close(
                a, b, msg=lambda m, name=name, i=i: f"{name} output {i}: {m}"
            )

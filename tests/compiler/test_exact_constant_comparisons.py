"""Comparisons of a constant tensor with a number give eager's booleans.

Torch-MLIR folds ``aten.<cmp>.Scalar`` of a constant tensor by reading the tensor as the
number's kind: a float constant compared with an int has its float read as an integer,
so ``scalar_tensor(0.1) < 0`` and ``scalar_tensor(-0.1) < 0`` folded to the same boolean,
true or false by the memory read (``x // 0.1`` decomposes into that comparison and was one
off in every element in about half of the processes). ``prepare`` now hands Torch-MLIR a
tensor and a number of one kind (``rewrites._type_comparison_scalars``).
"""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch

from tests.compiler.exact import bits_equal
from torchneuron.compiler import compile_graph

aten = torch.ops.aten
_CMPS = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]


@pytest.mark.parametrize("in_process", [False, True], ids=["worker", "in-process"])
def test_floor_division_by_a_python_float(in_process: bool) -> None:
    """``1.0 // 0.1`` is 9 (it was 8 in every process that lowered in-process)."""
    x = torch.tensor([1.0, -0.5, 5.0, 0.3, -0.3, 7.0, 1e6, -2.5])
    fn = lambda p: torch.stack([p // 0.1, p // -0.3])  # noqa: E731
    bits_equal(compile_graph(fn, [x], in_process=in_process).run([x])[0], fn(x))


@pytest.mark.parametrize("in_process", [False, True], ids=["worker", "in-process"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool],
                         ids=str)
def test_a_constant_compared_with_a_number(dtype: torch.dtype, in_process: bool) -> None:
    """0-d constants (what Torch-MLIR folds) of both signs against numbers of every kind,
    lowered in the worker and in this process (``TORCHNEURON_COMPILE_IN_PROCESS``, where
    the old fold read the same garbage for every constant)."""
    numbers: list[Any] = [0, 1, -1, 0.5, -0.25, True, 70000]

    def fn(p: torch.Tensor) -> torch.Tensor:
        outs = []
        for value in (0.1, -0.1, 1.0, -1.0, 0.0):
            v = value if dtype.is_floating_point else int(value)
            c = aten.scalar_tensor.default(bool(v) if dtype == torch.bool else v, dtype=dtype)
            outs += [p + cmp(c, n) for cmp in _CMPS for n in numbers]
        return torch.stack(outs)

    x = torch.zeros(3)
    bits_equal(compile_graph(fn, [x], in_process=in_process).run([x])[0], fn(x))

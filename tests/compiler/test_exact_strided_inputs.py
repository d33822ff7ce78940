"""An input with gaps between its rows (a column slice or chunk of a wider tensor) reaches
elementwise ops in its own layout, as in eager.

ATen's elementwise loops run rows shorter than two vectors in their scalar tail, whose
``exp`` is libm's, not SLEEF's; a contiguous copy of the same values runs the vector body.
The executable handed the interpreter contiguous copies of every such input, so
``sigmoid`` of a (64, 8) slice of a (64, 24) tensor differed from eager in 20 of 512
elements (``executable.traced_layouts``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import bits_equal
from torchneuron.compiler import compile_graph


@pytest.mark.parametrize("op", [torch.sigmoid, torch.exp, torch.tanh, torch.log1p,
                                torch.expm1], ids=lambda f: f.__name__)
def test_an_elementwise_op_of_a_column_slice(op) -> None:  # noqa: ANN001
    base = torch.randn(64, 24, generator=torch.Generator().manual_seed(0))
    x, y = base[:, :8], base[:, 8:16].contiguous()  # (not cloned: a clone is contiguous)
    fn = lambda a, b: (op(a) * b, op(a + b))  # noqa: E731
    for got, want in zip(compile_graph(fn, [x, y]).run([x, y]), fn(x, y), strict=True):
        bits_equal(got, want)


def test_an_input_also_read_by_a_call_of_eagers_kernel() -> None:
    """A call of eager's kernel (``log_sigmoid_forward``) reading the same input made the
    executable hand the elementwise ops a contiguous copy too (the call re-lays its operand
    itself): ``logit(sigmoid(x))`` of a stepped input was off in 98 of 2310 elements."""
    base = torch.rand(66, 210, generator=torch.Generator().manual_seed(3)) * 4 - 2
    x = base[::2, ::3]
    fn = lambda a: (torch.logit(torch.sigmoid(a)), F.logsigmoid(a))  # noqa: E731
    for got, want in zip(compile_graph(fn, [x]).run([x]), fn(x), strict=True):
        bits_equal(got, want)


@pytest.mark.parametrize("other", ["column", "mv"])
def test_an_input_also_read_by_ops_that_need_it_contiguous(other: str) -> None:
    """A slice of the same input (``x[:, 3]``, ``mv``'s ``x[0]``) made the executable hand
    every reader a contiguous copy, the elementwise ops too: ``logit(sigmoid(x))`` of a
    stepped input off in 98 of 2310 elements. Those readers read a copy now
    (``interpreter.contiguous_copies``), the elementwise ones the input."""
    base = torch.rand(66, 210, generator=torch.Generator().manual_seed(3)) * 4 - 2
    x = base[::2, ::3]
    others = {"column": lambda a: a[:, 3] + 1, "mv": lambda a: torch.mv(a, a[0] * 0.5)}
    fn = lambda a: (torch.logit(torch.sigmoid(a)), others[other](a))  # noqa: E731
    for got, want in zip(compile_graph(fn, [x]).run([x]), fn(x), strict=True):
        bits_equal(got, want)

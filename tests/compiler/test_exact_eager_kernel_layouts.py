"""Eager's kernels in a program are handed their operands in eager's layout (issue 22).

Why: ATen's loops walk an operand in the order of its strides, so eager's bits for a
channels-last, transposed or stepped operand are not those for the same values
contiguous (which elements take the vector body's SLEEF routine and which the scalar
tail's libm one, in which order a sum adds). The program's values have no layout; the
call records the strides eager's operand had and the target rebuilds them
(``stablehlo/operand_layout.py``). Before, measured in one program of these cases:
channels-last ``gelu`` off in 1664 of 2376 float32 elements, training batch norm in
1307, group norm in 1399, a norm over channels in 24 of 396; a group norm of a stepped
input and ``pdist`` of a transposed one failed to run (their kernels demand the
contiguous operand eager had); a sum and ``mse_loss`` over a channels-last tensor
(lowered: the program summed in contiguous order) off in 5 of 6 and 1 of 1; a float16
training batch norm of a channels-last input (PyTorch's decomposition) in 588 of 2376.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import cases_match_eager
from torchneuron.compiler.stablehlo.operand_layout import in_layout, layout_of

CL = torch.channels_last


def _half_batch_norm(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = x.half().contiguous(memory_format=CL)
    rm, rv = torch.zeros(6, dtype=torch.half), torch.ones(6, dtype=torch.half)
    w, b = (torch.arange(6) * 0.25 + 0.5).half(), (torch.arange(6) * 0.5 - 1).half()
    return F.batch_norm(h, rm, rv, w, b, training=True), rm, rv


CASES = {
    "gelu-channels-last": lambda x, m: F.gelu(x.contiguous(memory_format=CL)),
    "batch-norm-channels-last": lambda x, m: F.batch_norm(
        x.contiguous(memory_format=CL), None, None, training=True),
    "group-norm-channels-last": lambda x, m: F.group_norm(x.contiguous(memory_format=CL), 2),
    "group-norm-stepped": lambda x, m: F.group_norm(x[:, :, :, ::2], 3),
    "norm-over-channels": lambda x, m: torch.linalg.vector_norm(
        x.contiguous(memory_format=CL), dim=1),
    "sum-channels-last": lambda x, m: x.contiguous(memory_format=CL).sum((0, 2, 3)),
    "mse-channels-last": lambda x, m: F.mse_loss(x.contiguous(memory_format=CL), x * 0.3),
    "float16-batch-norm-channels-last": lambda x, m: _half_batch_norm(x),
    "pdist-transposed": lambda x, m: F.pdist(m.t()[:9]),
    "mv-transposed": lambda x, m: torch.mv(m.t(), m[:, 0]),
}


def test_eager_kernels_of_strided_operands_give_eagers_bits() -> None:
    """One program of every case (one compile), each output equal to eager's bits."""
    x = torch.rand(4, 6, 9, 11, generator=torch.Generator().manual_seed(3)) * 4 - 2
    m = torch.rand(66, 70, generator=torch.Generator().manual_seed(4)) * 4 - 2
    cases_match_eager(CASES, x, m)


@pytest.mark.same_on_every_cpu
@pytest.mark.parametrize("name,make", [
    ("transposed", lambda b: b.t()),
    ("channels-last", lambda b: b.reshape(2, 3, 4, 5).contiguous(memory_format=CL)),
    ("stepped", lambda b: b[::2, 1::3]),
    ("expanded", lambda b: b[:1].expand(12, 10)),
    ("overlapping", lambda b: b.reshape(-1).unfold(0, 4, 2)),
    ("empty", lambda b: b[:0].t()),
])  # fmt: skip
def test_in_layout_rebuilds_eagers_strides(name: str, make) -> None:
    """The operand the target gets has eager's operand's strides and values."""
    eager = make(torch.arange(120, dtype=torch.float32).reshape(12, 10))
    strides = layout_of(eager)
    assert strides is not None
    got = in_layout(eager.contiguous(), strides)
    assert got.stride() == eager.stride() and torch.equal(got, eager)
    assert in_layout(eager, None).is_contiguous() and torch.equal(in_layout(eager, None), eager)

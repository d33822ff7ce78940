"""Fractional max pooling compiles (it had no lowering) and gives eager's numbers.

The random offsets are an input (``_random_samples``), so eager and compiled see the
same windows; values, indices (including NaN and tied windows) and the backward are
compared with ATen's CPU kernels exactly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torchneuron.compiler import compile_graph

aten = torch.ops.aten


def test_fractional_max_pool2d_and_3d_forward_backward_match_eager() -> None:
    torch.manual_seed(0)
    x2, x3 = torch.randn(2, 3, 7, 9).round(), torch.randn(2, 2, 5, 6, 7)
    x2[0, 0, 0, :3] = float("nan")
    s2, s3 = torch.rand(2, 3, 2), torch.rand(2, 2, 3)
    g2, g3 = torch.randn(2, 3, 4, 5), torch.randn(2, 2, 3, 4, 3)

    def fn(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
           ga: torch.Tensor, gb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y2, i2 = F.fractional_max_pool2d(a, (2, 3), output_size=(4, 5), _random_samples=sa,
                                         return_indices=True)
        y3, i3 = F.fractional_max_pool3d(b, (2, 2, 3), output_size=(3, 4, 3),
                                         _random_samples=sb, return_indices=True)
        d2 = aten.fractional_max_pool2d_backward(ga, a, [2, 3], [4, 5], i2)
        d3 = aten.fractional_max_pool3d_backward(gb, b, [2, 2, 3], [3, 4, 3], i3)
        return y2, i2, y3, i3, d2, d3

    args = [x2, x3, s2, s3, g2, g3]
    got = compile_graph(fn, args).run(args)
    for g, w in zip(got, fn(*args), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


def test_unbatched_input_with_more_sample_rows_than_batches_reads_row_0() -> None:
    """ModuleInfo's FractionalMaxPool3d no-batch-dim sample: the module holds samples for
    a batch of 2 and is called on one unbatched input; eager reads row 0 (our reshape to
    the samples' batch failed inside Dynamo)."""
    torch.manual_seed(0)
    x, s = torch.randn(4, 5, 5, 5), torch.rand(2, 4, 3)

    def fn(a: torch.Tensor, sa: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.fractional_max_pool3d(a, 2, output_ratio=0.5, _random_samples=sa,
                                       return_indices=True)

    for g, w in zip(compile_graph(fn, [x, s]).run([x, s]), fn(x, s), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_1x1_windows_whose_indices_pass_through_a_chain_of_reshapes() -> None:
    """The OpInfo sample that failed to run: the index computation reshapes
    [1,1,8,8,1,1] -> [1,1,64,1] -> [1,1,64] -> [1,1,64,1], and the interpreter's simplify
    took the last reshape for an identity of the first one's operand (it compared with
    the middle reshape's declared operand type, not the operand it reads after folding)."""
    torch.manual_seed(0)
    x, s = torch.randn(1, 1, 16, 16), torch.rand(1, 1, 2)

    def fn(a: torch.Tensor, sa: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.fractional_max_pool2d(a, (1, 1), output_ratio=(0.5, 0.5), _random_samples=sa,
                                       return_indices=True)

    got = compile_graph(fn, [x, s]).run([x, s])
    for g, w in zip(got, fn(x, s), strict=True):
        assert torch.equal(g, w)

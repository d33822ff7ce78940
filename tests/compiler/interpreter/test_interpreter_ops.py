"""Hand-written StableHLO for ops and semantics torch-mlir rarely emits.

Each program runs through parse -> JSON -> interpret and is checked against values
computed independently with torch or plain python.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter import UnsupportedStableHLOOp


def _fn(body: str, sig: str, results: str) -> str:
    return f"func.func @main({sig}) -> ({results}) {{\n{body}\n}}"


def test_while_loop_sums_indices(run_json) -> None:
    text = _fn(
        """
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c1 = stablehlo.constant dense<1> : tensor<i64>
  %0:2 = "stablehlo.while"(%c0, %c0) ({
  ^bb0(%i: tensor<i64>, %s: tensor<i64>):
    %p = "stablehlo.compare"(%i, %arg0) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "stablehlo.return"(%p) : (tensor<i1>) -> ()
  }, {
  ^bb0(%i: tensor<i64>, %s: tensor<i64>):
    %s2 = "stablehlo.add"(%s, %i) : (tensor<i64>, tensor<i64>) -> tensor<i64>
    %i2 = "stablehlo.add"(%i, %c1) : (tensor<i64>, tensor<i64>) -> tensor<i64>
    "stablehlo.return"(%i2, %s2) : (tensor<i64>, tensor<i64>) -> ()
  }) : (tensor<i64>, tensor<i64>) -> (tensor<i64>, tensor<i64>)
  return %0#1 : tensor<i64>""",
        "%arg0: tensor<i64>",
        "tensor<i64>",
    )
    (out,) = run_json(text, [torch.tensor(10)])
    assert out.item() == sum(range(10))


def test_case_picks_branch_and_clamps_index(run_json) -> None:
    text = _fn(
        """
  %0 = "stablehlo.case"(%arg0) ({
    %a = stablehlo.constant dense<10.0> : tensor<f32>
    "stablehlo.return"(%a) : (tensor<f32>) -> ()
  }, {
    %b = stablehlo.constant dense<20.0> : tensor<f32>
    "stablehlo.return"(%b) : (tensor<f32>) -> ()
  }) : (tensor<i32>) -> tensor<f32>
  return %0 : tensor<f32>""",
        "%arg0: tensor<i32>",
        "tensor<f32>",
    )
    got = [run_json(text, [torch.tensor(i, dtype=torch.int32)])[0].item() for i in (0, 1, 7, -1)]
    assert got == [10.0, 20.0, 20.0, 20.0]


def test_integer_bit_ops(run_json) -> None:
    text = _fn(
        """
  %0 = stablehlo.shift_left %arg0, %arg1 : tensor<6xi32>
  %1 = stablehlo.shift_right_arithmetic %arg0, %arg1 : tensor<6xi32>
  %2 = stablehlo.shift_right_logical %arg0, %arg1 : tensor<6xi32>
  %3 = stablehlo.popcnt %arg0 : tensor<6xi32>
  %4 = stablehlo.count_leading_zeros %arg0 : tensor<6xi32>
  %5 = stablehlo.divide %arg0, %arg1 : tensor<6xi32>
  %6 = stablehlo.remainder %arg0, %arg1 : tensor<6xi32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>, tensor<6xi32>""",
        "%arg0: tensor<6xi32>, %arg1: tensor<6xi32>",
        ", ".join(["tensor<6xi32>"] * 7),
    )
    a = [-7, 7, -1, 1 << 20, 5, -8]
    b = [2, 3, 31, 33, 1, 3]
    outs = run_json(text, [torch.tensor(a, dtype=torch.int32), torch.tensor(b, dtype=torch.int32)])

    def wrap(v: int) -> int:
        v &= 0xFFFFFFFF
        return v - (1 << 32) if v >> 31 else v

    want = [
        [wrap(x << s) if s < 32 else 0 for x, s in zip(a, b, strict=False)],
        [x >> min(s, 31) for x, s in zip(a, b, strict=False)],
        [wrap((x & 0xFFFFFFFF) >> s) if s < 32 else 0 for x, s in zip(a, b, strict=False)],
        [bin(x & 0xFFFFFFFF).count("1") for x in a],
        [32 - (x & 0xFFFFFFFF).bit_length() for x in a],
        [int(x / s) for x, s in zip(a, b, strict=False)],  # truncation toward zero
        [x - int(x / s) * s for x, s in zip(a, b, strict=False)],  # sign of the dividend
    ]
    for got, exp in zip(outs, want, strict=True):
        assert got.tolist() == exp


def test_compare_totalorder_and_unsigned(run_json) -> None:
    text = _fn(
        """
  %0 = stablehlo.compare LT, %arg0, %arg1, TOTALORDER : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %1 = stablehlo.compare LT, %arg2, %arg3, UNSIGNED : (tensor<3xi8>, tensor<3xi8>) -> tensor<3xi1>
  %2 = stablehlo.compare EQ, %arg0, %arg1, FLOAT : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0, %1, %2 : tensor<4xi1>, tensor<3xi1>, tensor<4xi1>""",
        "%arg0: tensor<4xf32>, %arg1: tensor<4xf32>, %arg2: tensor<3xi8>, %arg3: tensor<3xi8>",
        "tensor<4xi1>, tensor<3xi1>, tensor<4xi1>",
    )
    nan = float("nan")
    a = torch.tensor([-0.0, 1.0, nan, -nan])
    b = torch.tensor([0.0, nan, 1.0, 1.0])
    lt, ult, eq = run_json(
        text,
        [
            a,
            b,
            torch.tensor([-1, 1, 5], dtype=torch.int8),
            torch.tensor([1, -1, 5], dtype=torch.int8),
        ],
    )
    assert lt.tolist() == [True, True, False, True]
    assert ult.tolist() == [False, True, False]
    assert eq.tolist() == [True, False, False, False]


def test_rounding_and_conversions(run_json) -> None:
    text = _fn(
        """
  %0 = stablehlo.round_nearest_afz %arg0 : tensor<7xf32>
  %1 = stablehlo.round_nearest_even %arg0 : tensor<7xf32>
  %2 = stablehlo.convert %arg0 : (tensor<7xf32>) -> tensor<7xi32>
  %3 = stablehlo.bitcast_convert %arg0 : (tensor<7xf32>) -> tensor<7xi32>
  %4 = stablehlo.convert %arg0 : (tensor<7xf32>) -> tensor<7xi1>
  return %0, %1, %2, %3, %4 : tensor<7xf32>, tensor<7xf32>, tensor<7xi32>, tensor<7xi32>, tensor<7xi1>""",
        "%arg0: tensor<7xf32>",
        "tensor<7xf32>, tensor<7xf32>, tensor<7xi32>, tensor<7xi32>, tensor<7xi1>",
    )
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -1.7])
    afz, even, conv, bits, nz = run_json(text, [x])
    assert afz.tolist() == [1.0, 2.0, 3.0, -1.0, -3.0, 0.0, -2.0]
    assert even.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 0.0, -2.0]
    assert conv.tolist() == [0, 1, 2, 0, -2, 0, -1]
    assert torch.equal(bits, x.view(torch.int32))
    assert nz.tolist() == [True] * 7


def test_multi_key_sort_with_general_comparator(run_json) -> None:
    text = _fn(
        """
  %0:2 = "stablehlo.sort"(%arg0, %arg1) ({
  ^bb0(%a0: tensor<i32>, %b0: tensor<i32>, %a1: tensor<f32>, %b1: tensor<f32>):
    %lt = "stablehlo.compare"(%a0, %b0) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %eq = "stablehlo.compare"(%a0, %b0) {comparison_direction = #stablehlo<comparison_direction EQ>} : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %gt1 = "stablehlo.compare"(%a1, %b1) {comparison_direction = #stablehlo<comparison_direction GT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %t = "stablehlo.and"(%eq, %gt1) : (tensor<i1>, tensor<i1>) -> tensor<i1>
    %r = "stablehlo.or"(%lt, %t) : (tensor<i1>, tensor<i1>) -> tensor<i1>
    "stablehlo.return"(%r) : (tensor<i1>) -> ()
  }) {dimension = 1 : i64, is_stable = true} : (tensor<2x7xi32>, tensor<2x7xf32>) -> (tensor<2x7xi32>, tensor<2x7xf32>)
  return %0#0, %0#1 : tensor<2x7xi32>, tensor<2x7xf32>""",
        "%arg0: tensor<2x7xi32>, %arg1: tensor<2x7xf32>",
        "tensor<2x7xi32>, tensor<2x7xf32>",
    )
    k = torch.tensor([[3, 1, 2, 1, 3, 0, 1], [0, 0, 0, 1, 1, 1, 0]], dtype=torch.int32)
    v = torch.randn(2, 7)
    ks, vs = run_json(text, [k, v])
    for row in range(2):
        want = sorted(
            zip(k[row].tolist(), v[row].tolist(), strict=False), key=lambda p: (p[0], -p[1])
        )
        assert list(zip(ks[row].tolist(), vs[row].tolist(), strict=False)) == want


def test_select_and_scatter_is_max_pool_backward(run_json) -> None:
    text = _fn(
        """
  %init = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = "stablehlo.select_and_scatter"(%arg0, %arg1, %init) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %c = "stablehlo.compare"(%a, %b) {comparison_direction = #stablehlo<comparison_direction GE>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
    "stablehlo.return"(%c) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%s) : (tensor<f32>) -> ()
  }) {window_dimensions = array<i64: 1, 1, 3, 3>, window_strides = array<i64: 1, 1, 2, 2>, padding = dense<[[0, 0], [0, 0], [1, 1], [1, 1]]> : tensor<4x2xi64>} : (tensor<2x3x6x6xf32>, tensor<2x3x3x3xf32>, tensor<f32>) -> tensor<2x3x6x6xf32>
  return %0 : tensor<2x3x6x6xf32>""",
        "%arg0: tensor<2x3x6x6xf32>, %arg1: tensor<2x3x3x3xf32>",
        "tensor<2x3x6x6xf32>",
    )
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    g = torch.randn(2, 3, 3, 3)
    (want,) = torch.autograd.grad(F.max_pool2d(x, 3, 2, 1), x, g)
    (got,) = run_json(text, [x.detach(), g])
    torch.testing.assert_close(got, want)


def test_dynamic_slices_clamp_starts(run_json) -> None:
    text = _fn(
        """
  %0 = stablehlo.dynamic_slice %arg0, %arg1, %arg2, sizes = [2, 3] : (tensor<4x5xf32>, tensor<i64>, tensor<i64>) -> tensor<2x3xf32>
  %1 = stablehlo.dynamic_update_slice %arg0, %arg3, %arg1, %arg2 : (tensor<4x5xf32>, tensor<2x3xf32>, tensor<i64>, tensor<i64>) -> tensor<4x5xf32>
  return %0, %1 : tensor<2x3xf32>, tensor<4x5xf32>""",
        "%arg0: tensor<4x5xf32>, %arg1: tensor<i64>, %arg2: tensor<i64>, %arg3: tensor<2x3xf32>",
        "tensor<2x3xf32>, tensor<4x5xf32>",
    )
    x, u = torch.randn(4, 5), torch.randn(2, 3)
    sl, upd = run_json(text, [x, torch.tensor(3), torch.tensor(-1), u])
    torch.testing.assert_close(sl, x[2:4, 0:3])  # start (3, -1) clamps to (2, 0)
    want = x.clone()
    want[2:4, 0:3] = u
    torch.testing.assert_close(upd, want)
    assert not torch.equal(x, want)  # the input was not written


def test_pad_interior_and_negative_edges(run_json) -> None:
    text = _fn(
        """
  %0 = stablehlo.pad %arg0, %arg1, low = [1, -1], high = [-1, 2], interior = [1, 0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<5x5xf32>
  return %0 : tensor<5x5xf32>""",
        "%arg0: tensor<3x4xf32>, %arg1: tensor<f32>",
        "tensor<5x5xf32>",
    )
    x = torch.arange(12.0).reshape(3, 4)
    (got,) = run_json(text, [x, torch.tensor(-1.0)])
    full = torch.full((5, 4), -1.0)
    full[0::2] = x  # interior padding between rows
    want = torch.full((6, 6), -1.0)
    want[1:, :4] = full
    torch.testing.assert_close(got, want[:5, 1:])


def test_gather_with_batching_dims(run_json) -> None:
    text = _fn(
        """
  %0 = "stablehlo.gather"(%arg0, %arg1) {dimension_numbers = #stablehlo.gather<offset_dims = [], collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 1>, slice_sizes = array<i64: 1, 1>} : (tensor<3x5xf32>, tensor<3x1xi64>) -> tensor<3xf32>
  return %0 : tensor<3xf32>""",
        "%arg0: tensor<3x5xf32>, %arg1: tensor<3x1xi64>",
        "tensor<3xf32>",
    )
    x, i = torch.randn(3, 5), torch.tensor([[4], [0], [2]])
    (got,) = run_json(text, [x, i])
    torch.testing.assert_close(got, x[torch.arange(3), i[:, 0]])


def test_scatter_with_general_body_runs_in_update_order(run_json) -> None:
    text = _fn(
        """
  %0 = "stablehlo.scatter"(%arg0, %arg1, %arg2) ({
  ^bb0(%cur: tensor<f32>, %upd: tensor<f32>):
    %two = stablehlo.constant dense<2.0> : tensor<f32>
    %m = "stablehlo.multiply"(%cur, %two) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %s = "stablehlo.add"(%m, %upd) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%s) : (tensor<f32>) -> ()
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>} : (tensor<4x2xf32>, tensor<3x1xi64>, tensor<3x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>""",
        "%arg0: tensor<4x2xf32>, %arg1: tensor<3x1xi64>, %arg2: tensor<3x2xf32>",
        "tensor<4x2xf32>",
    )
    x, i, u = torch.randn(4, 2), torch.tensor([[1], [3], [1]]), torch.randn(3, 2)
    (got,) = run_json(text, [x, i, u])
    want = x.clone()
    for j in range(3):
        want[i[j, 0]] = want[i[j, 0]] * 2 + u[j]
    torch.testing.assert_close(got, want)


def test_dot_general_preferred_f32_from_bf16(run_json) -> None:
    text = _fn(
        """
  %0 = stablehlo.dot_general %arg0, %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x16xbf16>, tensor<2x16x4xbf16>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>""",
        "%arg0: tensor<2x3x16xbf16>, %arg1: tensor<2x16x4xbf16>",
        "tensor<2x3x4xf32>",
    )
    a, b = torch.randn(2, 3, 16).bfloat16(), torch.randn(2, 16, 4).bfloat16()
    (got,) = run_json(text, [a, b])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, a.float() @ b.float())


def test_convolution_batch_group_count(run_json) -> None:
    # weight-gradient style: batch groups pair lhs batch slices with output features
    text = _fn(
        """
  %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {stride = [1], pad = [[0, 0]]} {batch_group_count = 2 : i64, feature_group_count = 1 : i64} : (tensor<4x3x8xf32>, tensor<6x3x3xf32>) -> tensor<2x6x6xf32>
  return %0 : tensor<2x6x6xf32>""",
        "%arg0: tensor<4x3x8xf32>, %arg1: tensor<6x3x3xf32>",
        "tensor<2x6x6xf32>",
    )
    x, w = torch.randn(4, 3, 8), torch.randn(6, 3, 3)
    (got,) = run_json(text, [x, w])
    want = torch.cat([F.conv1d(x[:2], w[:3]), F.conv1d(x[2:], w[3:])], dim=1)
    torch.testing.assert_close(got, want)


def test_func_call(run_json) -> None:
    text = """
func.func private @twice(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.add %x, %x : tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func @main(%arg0: tensor<3xf32>) -> tensor<3xf32> {
  %0 = func.call @twice(%arg0) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = func.call @twice(%0) : (tensor<3xf32>) -> tensor<3xf32>
  return %1 : tensor<3xf32>
}"""
    x = torch.randn(3)
    (got,) = run_json(text, [x])
    torch.testing.assert_close(got, 4 * x)


def test_custom_call_and_unknown_ops_raise_typed_error(run_json) -> None:
    custom = _fn(
        """
  %0 = stablehlo.custom_call @my_kernel(%arg0) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>""",
        "%arg0: tensor<3xf32>",
        "tensor<3xf32>",
    )
    with pytest.raises(UnsupportedStableHLOOp, match="my_kernel"):
        run_json(custom, [torch.randn(3)])
    fft = _fn(
        """
  %0 = stablehlo.fft %arg0, type = FFT, length = [4] : (tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>>
  return %0 : tensor<4xcomplex<f32>>""",
        "%arg0: tensor<4xcomplex<f32>>",
        "tensor<4xcomplex<f32>>",
    )
    with pytest.raises(UnsupportedStableHLOOp, match="stablehlo.fft"):
        run_json(fft, [torch.randn(4, dtype=torch.complex64)])


def test_convert_to_and_from_complex(run_json) -> None:
    text = _fn(
        """
  %0 = stablehlo.convert %arg0 : (tensor<3xf32>) -> tensor<3xcomplex<f32>>
  %1 = stablehlo.convert %0 : (tensor<3xcomplex<f32>>) -> tensor<3xf64>
  return %0, %1 : tensor<3xcomplex<f32>>, tensor<3xf64>""",
        "%arg0: tensor<3xf32>",
        "tensor<3xcomplex<f32>>, tensor<3xf64>",
    )
    x = torch.randn(3)
    c, back = run_json(text, [x])
    assert c.dtype == torch.complex64 and torch.equal(c.real, x) and not c.imag.any()
    assert torch.equal(back, x.double())


def test_batch_norm_ops_match_torch(run_json) -> None:
    text = _fn(
        """
  %0:3 = "stablehlo.batch_norm_training"(%arg0, %arg1, %arg2) {epsilon = 1.0e-05 : f32, feature_index = 1 : i64} : (tensor<4x3x5xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<4x3x5xf32>, tensor<3xf32>, tensor<3xf32>)
  %1:3 = "stablehlo.batch_norm_grad"(%arg0, %arg1, %0#1, %0#2, %arg3) {epsilon = 1.0e-05 : f32, feature_index = 1 : i64} : (tensor<4x3x5xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4x3x5xf32>) -> (tensor<4x3x5xf32>, tensor<3xf32>, tensor<3xf32>)
  %2 = "stablehlo.batch_norm_inference"(%arg0, %arg1, %arg2, %0#1, %0#2) {epsilon = 1.0e-05 : f32, feature_index = 1 : i64} : (tensor<4x3x5xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<4x3x5xf32>
  return %0#0, %1#0, %1#1, %1#2, %2 : tensor<4x3x5xf32>, tensor<4x3x5xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4x3x5xf32>""",
        "%arg0: tensor<4x3x5xf32>, %arg1: tensor<3xf32>, %arg2: tensor<3xf32>, %arg3: tensor<4x3x5xf32>",
        "tensor<4x3x5xf32>, tensor<4x3x5xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4x3x5xf32>",
    )
    x, w, b, dy = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3), torch.randn(4, 3, 5)
    y, dx, dw, db, y_inf = run_json(text, [x, w, b, dy])
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    want = F.batch_norm(xs, None, None, ws, bs, training=True)
    gx, gw, gb = torch.autograd.grad(want, (xs, ws, bs), dy)
    for got, exp in [(y, want), (dx, gx), (dw, gw), (db, gb), (y_inf, want)]:
        torch.testing.assert_close(got, exp.detach())


def test_cholesky_and_triangular_solve(run_json) -> None:
    text = _fn(
        """
  %0 = "stablehlo.cholesky"(%arg0) {lower = true} : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %1 = "stablehlo.triangular_solve"(%0, %arg1) {left_side = true, lower = true, unit_diagonal = false, transpose_a = #stablehlo<transpose TRANSPOSE>} : (tensor<3x3xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  return %0, %1 : tensor<3x3xf32>, tensor<3x2xf32>""",
        "%arg0: tensor<3x3xf32>, %arg1: tensor<3x2xf32>",
        "tensor<3x3xf32>, tensor<3x2xf32>",
    )
    m = torch.randn(3, 3)
    a, b = m @ m.T + 3 * torch.eye(3), torch.randn(3, 2)
    chol, sol = run_json(text, [a, b])
    torch.testing.assert_close(chol, torch.linalg.cholesky(a))
    torch.testing.assert_close(chol.T @ sol, b)  # solves L^T x = b

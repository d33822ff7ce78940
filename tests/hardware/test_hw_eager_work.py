"""aten op -> engine classification and shape math, on real CPU tensors and overloads."""

from __future__ import annotations

import torch

from torchneuron.hardware import KernelWork, aten_kernel_work, get_profile, kernel_cost

aten = torch.ops.aten


def _work(func, *args, **kwargs) -> KernelWork | None:  # type: ignore[no-untyped-def]
    out = func(*args, **kwargs)
    return aten_kernel_work(func, args, kwargs, out)


def test_mm_on_tensor_engine() -> None:
    a, b = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(32, 16, dtype=torch.bfloat16)
    w = _work(aten.mm.default, a, b)
    assert w is not None and w.matmuls == [(1, 64, 32, 16, "bf16")]
    assert w.hbm_read_bytes == (64 * 32 + 32 * 16) * 2 and w.hbm_write_bytes == 64 * 16 * 2
    bw = _work(aten.bmm.default, torch.randn(3, 4, 5), torch.randn(3, 5, 6))
    assert bw is not None and bw.matmuls == [(3, 4, 5, 6, "f32")]
    aw = _work(aten.addmm.default, torch.randn(6), torch.randn(4, 5), torch.randn(5, 6))
    assert aw is not None and aw.matmuls == [(1, 4, 5, 6, "f32")] and aw.vector_elems == 24
    # the broadcast bias is read once, not once per row
    assert aw.hbm_read_bytes == (6 + 20 + 30) * 4


def test_elementwise_engines() -> None:
    x = torch.randn(8, 16)
    exp = _work(aten.exp.default, x)
    assert exp is not None and exp.scalar_elems == 128 and exp.vector_elems == 0
    add = _work(aten.add.Tensor, x, x)
    assert add is not None and add.vector_elems == 256 and add.scalar_elems == 0  # 2N
    inplace = _work(aten.mul_.Tensor, x.clone(), 2.0)
    assert inplace is not None and inplace.vector_elems == 128
    fill = _work(aten.fill_.Scalar, x.clone(), 1.0)
    assert fill is not None and fill.hbm_read_bytes == 0 and fill.hbm_write_bytes == 512


def test_metadata_ops_have_no_kernel() -> None:
    x = torch.randn(4, 6)
    assert _work(aten.view.default, x, [6, 4]) is None
    assert _work(aten.t.default, x) is None
    assert _work(aten.expand.default, torch.randn(1, 6), [4, 6]) is None
    assert _work(aten._unsafe_view.default, x, [24]) is None
    assert _work(aten.empty.memory_format, [3]) is None
    assert _work(aten.sym_size.int, x, 0) is None


def test_gpsimd_reductions_and_copies() -> None:
    x = torch.randn(10, 4)
    sel = _work(aten.index_select.default, x, 0, torch.tensor([1, 3]))
    assert sel is not None and sel.gpsimd_elems == 8
    assert (_work(aten.sort.default, x) or KernelWork()).gpsimd_elems == 40 * 2
    red = _work(aten.sum.dim_IntList, x, [1])
    assert red is not None and red.vector_elems == 40 and not red.matmuls
    sm = _work(aten._softmax.default, x, -1, False)
    assert sm is not None and sm.scalar_elems == 40 and sm.vector_elems > 0
    cp = _work(aten.clone.default, x)
    assert cp == KernelWork(hbm_read_bytes=160, hbm_write_bytes=160)
    dst = torch.empty(10, 4, dtype=torch.bfloat16)
    copy = _work(aten.copy_.default, dst, x)
    assert copy == KernelWork(hbm_read_bytes=160, hbm_write_bytes=80)


def test_convolution_implicit_gemm_shapes() -> None:
    x, w, b = torch.randn(2, 3, 32, 32), torch.randn(16, 3, 3, 3), torch.randn(16)
    conv = _work(aten.convolution.default, x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
    # out 2x16x16x16: M = 2*16*16, K = 3*3*3, N = 16
    assert conv is not None and conv.matmuls == [(1, 512, 27, 16, "f32")]
    grouped = _work(
        aten.convolution.default, torch.randn(1, 8, 10, 10), torch.randn(8, 2, 3, 3), None,
        [1, 1], [0, 0], [1, 1], False, [0, 0], 4,
    )  # fmt: skip
    assert grouped is not None and grouped.matmuls == [(4, 64, 18, 2, "f32")]
    go = torch.randn(2, 16, 16, 16)
    bwd = _work(aten.convolution_backward.default, go, x, w, [16], [2, 2], [1, 1], [1, 1],
                False, [0, 0], 1, [True, True, True])  # fmt: skip
    assert bwd is not None
    assert bwd.matmuls == [(1, 512, 16, 27, "f32"), (1, 27, 512, 16, "f32")]
    assert bwd.vector_elems == go.numel()


def test_unknown_or_odd_ops_never_crash() -> None:
    x = torch.randn(5, 5)
    for func, args in [
        (aten.linalg_cholesky_ex.default, (x @ x.T + 5 * torch.eye(5),)),
        (aten.nonzero.default, (x > 0,)),
        (aten._local_scalar_dense.default, (torch.tensor(3.0),)),
        (aten.cat.default, ([x, x],)),
    ]:
        w = _work(func, *args)
        assert w is not None
        assert kernel_cost(w, get_profile("trn2")).total_ns > 0
    # a malformed call is still costed, from its output
    w = aten_kernel_work(aten.mm.default, (), {}, torch.empty(3, 3))
    assert w is not None and w.vector_elems == 9


def test_foreach_fills_and_host_only_ops() -> None:
    xs = [torch.randn(10) for _ in range(3)]
    ys = [torch.randn(10) for _ in range(3)]
    add = _work(aten._foreach_add_.List, xs, ys)  # returns None, writes xs
    assert add is not None and add.vector_elems == 60
    assert (add.hbm_read_bytes, add.hbm_write_bytes) == (240, 120)
    sqrt = _work(aten._foreach_sqrt.default, xs)
    assert sqrt is not None and (sqrt.scalar_elems, sqrt.vector_elems) == (30, 0)
    zeros = _work(aten.zeros_like.default, xs[0])
    assert zeros == KernelWork(vector_elems=10, hbm_write_bytes=40)
    enter = torch.ops.profiler._record_function_enter_new.default
    assert aten_kernel_work(enter, ("label", None), {}, None) is None


def test_transposed_convolution_gemm() -> None:
    x, w = torch.randn(2, 8, 5, 5), torch.randn(8, 4, 3, 3)  # Cin=8, Cout=4
    conv = _work(aten.convolution.default, x, w, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1)
    # every input pixel scatters Cout*k outputs: M = 2*25, K = Cin, N = 4*9
    assert conv is not None and conv.matmuls == [(1, 50, 8, 36, "f32")]
    # flops of the direct form: every input element meets Cout * kh * kw weights
    assert conv.flops == 2 * x.numel() * w.shape[1] * 9


def test_lstm_layer_is_one_kernel_of_its_steps() -> None:
    """oneDNN's LSTM layer (``rnn_work``): the input projection and one recurrent matmul
    per step on TensorE, gates on ScalarE / VectorE, an instruction per gate operation per
    step; oneDNN's workspace (host-specific size) is not HBM traffic, the saved gates are."""
    t, b, i, h = 7, 3, 5, 6
    x, hx, cx = torch.randn(t, b, i), torch.randn(b, h), torch.randn(b, h)
    w0, w1, b0, b1 = torch.randn(4 * h, i), torch.randn(4 * h, h), torch.randn(4 * h), torch.randn(4 * h)
    w = _work(aten.mkldnn_rnn_layer.default, x, w0, w1, b0, b1, hx, cx, False, [], 2, h, 1,
              True, False, False, True)
    assert w is not None
    assert w.matmuls == [(1, t * b, i, 4 * h, "f32"), (t, b, h, 4 * h, "f32")]
    assert w.scalar_elems == t * b * 5 * h and w.vector_elems == t * b * 12 * h
    assert w.instructions == 9 * t
    tensors = (x, w0, w1, b0, b1, hx, cx)
    assert w.hbm_read_bytes == sum(a.numel() for a in tensors) * 4
    saved = t * b * 5 * h * 4
    assert w.hbm_write_bytes == (t * b * h + 2 * b * h) * 4 + saved
    cost = kernel_cost(w, get_profile("trn2"))
    assert cost.engine_ns["tensor"] > 0 and cost.total_ns > 0

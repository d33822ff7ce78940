"""Load-time fusions (``interpreter.collapse``) and the dot_general/select specializations
(``interpreter._specialize_math``) give the op-by-op interpreter's bits, are used on the
programs the lowering really produces, and fall back to the op-by-op run where the fast
call could differ (NaN windows, out-of-range indices).

Why: they replace what runs for every compiled max-pooling, matmul and select; a drift
would silently change every such program's numbers. Each case compares the fast run
with the same program run op by op (fusions and specializers off), bit for bit, and
with eager PyTorch on CPU.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter import _specialize, load
from torchneuron.compiler.interpreter.collapse import plugins
from torchneuron.compiler.interpreter.collapse.base import Collapsed
from torchneuron.compiler.pipeline import compile_graph

aten = torch.ops.aten
_interpret = importlib.import_module("torchneuron.compiler.interpreter.interpret")


def _runs(fn, args: list[torch.Tensor], monkeypatch) -> tuple[list, list, list[str]]:  # noqa: ANN001
    """(fast, op-by-op) results of ``fn``'s compiled program, and the fused ops and
    specialized callables (by name) its steps use."""
    module = compile_graph(fn, args)._module()
    fast_prepared = load(module)
    fast = fast_prepared.run(args)
    body = fast_prepared.block(module.functions[module.entry].body)
    fused = [s.op.name for s in body.steps if isinstance(s.op, Collapsed)]
    fused += [getattr(s.fn, "__name__", "") for s in body.steps]
    with monkeypatch.context() as m:
        m.setattr(plugins, "PLUGINS", ())
        m.setattr(_interpret, "absorb_broadcasts", lambda body, returns, pinned: body)
        m.setattr(_interpret, "absorb_transposes", lambda body, returns, pinned: body)
        m.setattr(_specialize, "SPECIALIZERS", {})
        slow = load(module).run(args)
    return fast, slow, fused


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.view(width), b.view(width))
    return torch.equal(a, b)


def _pool_input(shape: tuple[int, ...], case: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, shape, generator=g).float()  # many ties
    flat = x.view(-1)
    if case == "signed_zeros":
        flat[::3] = -0.0
        flat[1::3] = 0.0
    elif case == "nan":
        flat[5] = float("nan")
        flat[6] = -float("nan")  # two NaNs in a window: ATen reports the last
        flat[17] = float("nan")
    elif case == "neg_inf":
        flat[: flat.numel() // 2] = float("-inf")
    return x


@pytest.mark.parametrize("case", ["ties", "signed_zeros", "nan", "neg_inf"])
@pytest.mark.parametrize(
    "shape,kernel,stride",
    [((2, 3, 8, 8), 2, 2), ((2, 3, 9, 7), 3, 2), ((1, 2, 6, 9), (2, 3), (1, 2))],
)
def test_max_pool_forward_is_fused_and_exact(shape, kernel, stride, case, monkeypatch) -> None:  # noqa: ANN001
    x = _pool_input(shape, case)
    fast, slow, fused = _runs(lambda t: F.max_pool2d_with_indices(t, kernel, stride), [x],
                              monkeypatch)  # fmt: skip
    # ATen's kernel with its flat index, or the pool and its window position -> flat index
    assert "torchneuron.collapsed.max_pool_flat" in fused or (
        "torchneuron.collapsed.max_pool_window" in fused
        and "torchneuron.collapsed.one_hot_lookup" in fused
    )  # fmt: skip
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    ref_v, ref_i = F.max_pool2d_with_indices(x, kernel, stride)
    assert _same_bits(fast[0], ref_v)  # a NaN wins its window, as in ATen
    assert torch.equal(fast[1], ref_i)  # ATen reports a window's last NaN


@pytest.mark.parametrize("overlap", [False, True])
def test_max_pool_backward_is_fused_and_exact(overlap: bool, monkeypatch) -> None:  # noqa: ANN001
    k, s = (3, 2) if overlap else (2, 2)
    x = _pool_input((2, 3, 9, 9), "ties")
    _, idx = F.max_pool2d_with_indices(x, k, s)
    g = torch.randn(idx.shape, generator=torch.Generator().manual_seed(1))

    def bwd(g: torch.Tensor, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return aten.max_pool2d_with_indices_backward(g, x, [k, k], [s, s], [0, 0], [1, 1],
                                                     False, i)  # fmt: skip

    fast, slow, fused = _runs(bwd, [g, x, idx], monkeypatch)
    assert "torchneuron.collapsed.max_pool_scatter" in fused
    assert _same_bits(fast[0], slow[0])
    torch.testing.assert_close(fast[0], bwd(g, x, idx))
    bad = idx.clone()
    bad.view(-1)[0] = 10_000  # out of range: the scatter drops it; the fusion must too
    fast, slow, _ = _runs(bwd, [g, x, bad], monkeypatch)
    assert _same_bits(fast[0], slow[0])


@pytest.mark.parametrize(
    "fn,shapes",
    [
        (lambda a, b: a @ b, [(16, 64), (64, 128)]),
        (lambda a, b: a @ b.t(), [(16, 64), (128, 64)]),
        (torch.bmm, [(3, 5, 7), (3, 7, 4)]),
        (lambda a, b: torch.einsum("bhqd,bhkd->bhqk", a, b), [(2, 2, 8, 4), (2, 2, 8, 4)]),
        (lambda a, b: torch.einsum("qbhd,kbhd->bhqk", a, b), [(8, 2, 3, 4), (5, 2, 3, 4)]),
        (lambda a, b: (a.transpose(0, 1) @ b).transpose(1, 2) @ a.transpose(0, 1),
         [(4, 3, 5), (3, 5, 5)]),
    ],
)
def test_dot_general_specialization_is_exact(fn, shapes, monkeypatch) -> None:  # noqa: ANN001
    """Specialized, with transposes folded into its dimension numbers, same bits."""
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=g) for s in shapes]
    fast, slow, _ = _runs(fn, args, monkeypatch)
    assert _same_bits(fast[0], slow[0])
    torch.testing.assert_close(fast[0], fn(*args))


@pytest.mark.parametrize("n", [100, 8192])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_select_specialization_is_exact(n: int, dtype: torch.dtype, monkeypatch) -> None:  # noqa: ANN001
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, generator=g).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    c = torch.randn(n, generator=g)
    if dtype.is_floating_point:
        a[:7] = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), -float("inf"), -0.0, 1])
        b[:7] = torch.tensor([0.0, 0.0, -0.0, float("nan"), 2.0, -0.0, -0.0])
    fn = lambda p, x, y: torch.where(p > 0, x, y)  # noqa: E731
    fast, slow, _ = _runs(fn, [c, a, b], monkeypatch)
    assert _same_bits(fast[0], slow[0])
    assert _same_bits(fast[0], fn(c, a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_float_elementwise_specialization_is_exact(dtype: torch.dtype, monkeypatch) -> None:  # noqa: ANN001
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = torch.maximum((a + b) * b - a / b, torch.minimum(a, b)) ** 2
        return torch.exp(-c).sqrt() + torch.rsqrt(c.abs()) + torch.log(c) * torch.tanh(a) \
            + torch.sigmoid(b)

    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(5, 7, generator=g).to(dtype) for _ in range(2))
    a[0, :3] = torch.tensor([float("nan"), -0.0, float("inf")])
    fast, slow, _ = _runs(fn, [a, b], monkeypatch)
    assert _same_bits(fast[0], slow[0])


def test_a_prepared_program_runs_again_from_its_kept_constants(monkeypatch) -> None:  # noqa: ANN001
    """The second and later runs start from the first run's constants: same results."""
    x = _pool_input((2, 3, 8, 8), "ties")
    module = compile_graph(lambda t: F.max_pool2d_with_indices(t * 2 + 1, 2), [x])._module()
    p = load(module)
    first = p.run([x])
    block = p.block(module.functions[module.entry].body)
    assert block.consts and len(block.hot) < len(block.steps)
    for _ in range(2):
        assert all(_same_bits(a, b) for a, b in zip(p.run([x]), first, strict=True))
    y = x.flip(-1).contiguous()
    assert all(_same_bits(a, b) for a, b in zip(p.run([y]), load(module).run([y]),
                                                strict=True))  # fmt: skip


@pytest.mark.parametrize("out_of_range", [False, True])
def test_row_and_element_gather_scatter_specializations_are_exact(out_of_range: bool,
                                                                  monkeypatch) -> None:  # noqa: ANN001
    """Embedding lookup (row gather), its gradient (row scatter-add, repeated rows) and
    cross-entropy's target pick (element gather) against the generic implementations."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(11, 6, generator=g)
    idx = torch.randint(0, 11, (4, 9), generator=g)  # repeats: the add order matters
    if out_of_range:
        idx[0, 0], idx[1, 3] = 11, -2  # gather clamps; scatter drops
    grad = torch.randn(4, 9, 6, generator=g)
    take = lambda w, i: aten.embedding(w, i)  # noqa: E731
    add = lambda g_, i: aten.embedding_dense_backward(g_, i, 11, -1, False)  # noqa: E731
    pick = lambda x, t: x.gather(1, t[:, None])  # noqa: E731
    for fn, args, name in (
        (take, [w, idx], "take_rows"), (add, [grad, idx], "add_rows"),
        (pick, [torch.randn(5, 7, generator=g), torch.randint(0, 7, (5,))], "take_elements"),
    ):  # fmt: skip
        fast, slow, used = _runs(fn, args, monkeypatch)
        assert name in used
        assert _same_bits(fast[0], slow[0])
        if not out_of_range:
            torch.testing.assert_close(fast[0], fn(*args))


def test_broadcasts_are_absorbed_into_elementwise_readers(monkeypatch) -> None:  # noqa: ANN001
    """BatchNorm-like per-channel arithmetic: the broadcasts go, the bits stay."""

    def fn(x: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = (x - m[:, None, None]) * torch.rsqrt(v[:, None, None] + 1e-5)
        return y, torch.maximum(y, m[:, None, None]), (x > m[:, None, None]), m + v

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(2, 3, 4, 5, generator=g), torch.randn(3, generator=g),
            torch.rand(3, generator=g)]  # fmt: skip
    module = compile_graph(fn, args)._module()
    ops = module.functions[module.entry].body
    p = load(module)
    fast = p.run(args)
    n_bcast = sum(o.name == "stablehlo.broadcast_in_dim" for o in ops)
    kept = sum(s.op.name == "stablehlo.broadcast_in_dim" for s in p.block(ops).steps)
    assert n_bcast > 0 and kept < n_bcast
    with monkeypatch.context() as m:
        m.setattr(_interpret, "absorb_broadcasts", lambda body, returns, pinned: body)
        slow = load(module).run(args)
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    assert all(a.shape == b.shape for a, b in zip(fast, fn(*args), strict=True))


def test_a_weight_transpose_is_folded_into_dot_general() -> None:
    w, x = torch.randn(6, 4), torch.randn(3, 4)
    module = compile_graph(lambda x, w: x @ w.t(), [x, w])._module()
    ops = module.functions[module.entry].body
    p = load(module)
    torch.testing.assert_close(p.run([x, w])[0], x @ w.t())
    assert any(o.name == "stablehlo.transpose" for o in ops)
    assert not any(s.op.name == "stablehlo.transpose" for s in p.block(ops).steps)


@pytest.mark.parametrize("positions", [[0, 1, 2, 3], [0, 2, 1, 3]])
@pytest.mark.parametrize("out_of_range", [False, True])
def test_one_hot_lookup_is_exact(positions: list[int], out_of_range: bool, monkeypatch) -> None:  # noqa: ANN001
    """sum_k(where(i == p_k, table_k, 0)): a gather when p is 0..K-1, else the op-by-op
    run; an index matching no position gives 0."""
    g = torch.Generator().manual_seed(0)
    i = torch.randint(0, 4, (3, 1, 5), generator=g)
    if out_of_range:
        i[0, 0, 0], i[1, 0, 2] = 4, -1
    table = torch.randint(-50, 50, (3, 4, 5), generator=g)

    def fn(i: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        pos = torch.tensor(positions).reshape(1, 4, 1)
        return torch.where(i.expand(3, 4, 5) == pos, table, 0).sum(1)

    fast, slow, used = _runs(fn, [i, table], monkeypatch)
    assert "torchneuron.collapsed.one_hot_lookup" in used
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[0], fn(i, table))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_relu_backward_is_fused_and_exact(dtype: torch.dtype, threshold: float,
                                          monkeypatch) -> None:  # noqa: ANN001
    """``threshold_backward`` (ReLU's gradient): one fused call, the op-by-op bits and
    eager's, with NaN, signed zeros and values at the threshold in both inputs."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 50, generator=g).to(dtype)
    grad = torch.randn(6, 50, generator=g).to(dtype)
    x.view(-1)[:6] = torch.tensor([float("nan"), -0.0, 0.0, threshold, float("inf"), -1.0])
    grad.view(-1)[6:10] = torch.tensor([float("nan"), -0.0, 0.0, float("-inf")])

    def fn(gr: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return aten.threshold_backward(gr, t, threshold)

    fast, slow, fused = _runs(fn, [grad, x], monkeypatch)
    assert "torchneuron.collapsed.relu_backward" in fused
    assert _same_bits(fast[0], slow[0])
    assert _same_bits(fast[0], fn(grad, x))


def test_select_of_a_negative_zero_is_not_relu_backward(monkeypatch) -> None:  # noqa: ANN001
    """A select whose "zero" is -0.0 is not ReLU's gradient: the original ops run."""
    x, grad = torch.randn(4, 40), torch.randn(4, 40)
    fn = lambda gr, t: torch.where(t <= 0, torch.tensor(-0.0), gr)  # noqa: E731
    fast, slow, fused = _runs(fn, [grad, x], monkeypatch)
    assert "torchneuron.collapsed.relu_backward" in fused  # matched; its check refuses
    assert _same_bits(fast[0], slow[0])
    assert _same_bits(fast[0], fn(grad, x))


@pytest.mark.parametrize("out_of_range", [False, True])
def test_element_scatter_that_replaces_is_specialized_and_exact(out_of_range: bool,
                                                               monkeypatch) -> None:  # noqa: ANN001
    """Cross-entropy's gradient writes one element per row (a scatter whose body returns
    the update): the specialized ``index_put_`` gives the generic path's bits."""
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, 7, (5,), generator=g)
    if out_of_range:
        t[2] = 9  # dropped by both paths
    v = torch.randn(5, generator=g)
    fn = lambda src, i: torch.zeros(5, 7).scatter(1, i[:, None], src[:, None])  # noqa: E731
    fast, slow, used = _runs(fn, [v, t], monkeypatch)
    assert "element_scatter" in used  # the element scatter's specialized callable
    assert _same_bits(fast[0], slow[0])
    if not out_of_range:
        assert _same_bits(fast[0], fn(v, t))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_sum_specialization_is_exact(dtype: torch.dtype, monkeypatch) -> None:  # noqa: ANN001
    """A float sum reduce: the generic path's bits (signed zeros, NaN, inf included)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, 6, generator=g).to(dtype)
    x[0] = -0.0  # a slice of negative zeros: the init's +0.0 decides the sign
    x[1, 0, 0], x[2, 1, 1] = float("nan"), float("inf")
    fn = lambda t: (t.sum(dim=(0, 2)), t.sum(dim=1), t.sum())  # noqa: E731
    fast, slow, used = _runs(fn, [x], monkeypatch)
    assert "float_sum" in used
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    for a, b in zip(fast, fn(x), strict=True):
        torch.testing.assert_close(a, b, equal_nan=True)


def test_relu_backward_operands_read_at_run_time_are_not_trusted(monkeypatch) -> None:  # noqa: ANN001
    """A threshold or "zero" that is a program input can be written in place between
    runs: the prepared program must follow it, as eager does (the fusion's one-time check
    of those operands would go stale)."""
    x = torch.tensor([-1.0, 0.5, 2.0, 3.0])
    g = torch.tensor([10.0, 20.0, 30.0, 40.0])
    t, z = torch.zeros(4), torch.zeros(4)
    fn_t = lambda x, t, g: torch.where(x <= t, 0.0, g)  # noqa: E731
    fn_z = lambda x, z, g: torch.where(x <= 0.0, z, g)  # noqa: E731
    for fn, operand, values in ((fn_t, t, (2.5, 2.0)), (fn_z, z, (7.0, -0.0))):
        p = load(compile_graph(fn, [x, operand, g])._module())
        assert torch.equal(p.run([x, operand, g])[0], fn(x, operand, g))
        operand.fill_(values[0])  # still one value: a stale check would pass it
        assert _same_bits(p.run([x, operand, g])[0], fn(x, operand, g))
        operand[1] = values[1]  # no longer one value
        assert _same_bits(p.run([x, operand, g])[0], fn(x, operand, g))


def test_one_hot_lookup_positions_read_at_run_time_are_not_trusted() -> None:
    """The window positions as a program input, rewritten in place between runs: each
    run gives eager's sum, not a lookup checked against the first run's positions."""
    g = torch.Generator().manual_seed(0)
    i = torch.randint(0, 4, (3, 1, 5), generator=g)
    table = torch.randint(-50, 50, (3, 4, 5), generator=g)
    pos = torch.arange(4).reshape(1, 4, 1).expand(3, 4, 5).contiguous()  # read as is

    def fn(i: torch.Tensor, table: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return torch.where(i.expand(3, 4, 5) == pos, table, 0).sum(1)

    p = load(compile_graph(fn, [i, table, pos])._module())
    assert torch.equal(p.run([i, table, pos])[0], fn(i, table, pos))
    pos.copy_(torch.tensor([3, 1, 0, 2]).reshape(1, 4, 1).expand(3, 4, 5))
    assert torch.equal(p.run([i, table, pos])[0], fn(i, table, pos))


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1, dilation=2),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True),
])  # fmt: skip
def test_max_pool_of_all_neg_inf_windows_reports_an_inside_index(kw: dict, monkeypatch) -> None:  # noqa: ANN001
    """A window whose elements are all -inf, with padding or ceil-mode overhang at its
    start: ATen reports the window's first element inside the input, never a padding
    position (an index outside the input)."""
    x = torch.full((1, 2, 5, 6), float("-inf"))
    x[0, 1, ::2, ::3] = 1.0  # the other channel: some windows with a finite maximum
    fn = lambda t: F.max_pool2d_with_indices(t, **kw)  # noqa: E731
    fast, slow, _ = _runs(fn, [x], monkeypatch)
    ref_v, ref_i = fn(x)
    assert _same_bits(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
    assert _same_bits(fast[0], ref_v) and torch.equal(fast[1], ref_i)

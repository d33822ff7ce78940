"""Scatter / index reductions and 0-d gather / scatter (compiler/decomp_index.py) compiled
= eager CPU. All were refused before (no lowering)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.compiled import assert_compiles_to_eager
from tests.compiler.exact import bits_equal
from torchneuron.compiler import compile_graph

_g = torch.Generator().manual_seed(0)
X = torch.randn(6, 4, generator=_g)
X[2, 1] = float("nan")
IDX = torch.randint(0, 6, (5, 3), generator=_g)  # narrower than X in dim 1, duplicates
SRC = torch.randn(5, 4, generator=_g)
I1 = torch.tensor([4, 0, 4, 2, 1])  # index_reduce: position 4 twice, 3 and 5 never
S1 = torch.randn(5, 4, generator=_g)
SEQ = torch.randn(9, generator=_g)
SORTER = torch.argsort(SEQ)


def _cases() -> dict[str, tuple[Callable[..., Any], list[torch.Tensor]]]:
    cases: dict[str, tuple[Callable[..., Any], list[torch.Tensor]]] = {}
    for red in ("amax", "amin", "prod", "mean"):
        for inc in (True, False):
            cases[f"scatter_reduce_{red}_{inc}"] = (
                lambda x, i, s, r=red, k=inc: x.scatter_reduce(0, i, s, r, include_self=k),
                [X, IDX, SRC])
            cases[f"index_reduce_{red}_{inc}"] = (
                lambda x, i, s, r=red, k=inc: x.index_reduce(0, i, s, r, include_self=k),
                [X, I1, S1])
    cases["scatter_multiply"] = (lambda x, i, s: x.scatter(0, i, s, reduce="multiply"), [X, IDX, SRC])
    cases["scatter_add_value"] = (lambda x, i: x.scatter(0, i, 2.5, reduce="add"), [X, IDX])
    zero_d = torch.tensor(1.5)
    cases["gather_0d"] = (lambda x, i: torch.gather(x, 0, i), [zero_d, torch.tensor([0])])
    cases["scatter_add_0d"] = (lambda x, s: torch.scatter_add(x, 0, torch.tensor(0), s),
                               [zero_d, torch.tensor(2.0)])
    cases["scatter_reduce_0d"] = (lambda x, s: x.scatter_reduce(0, torch.tensor(0), s, "prod"),
                                  [zero_d, torch.tensor(3.0)])
    cases["searchsorted_sorter"] = (lambda q, v, o: torch.searchsorted(q, v, sorter=o),
                                    [SEQ, torch.randn(7, generator=_g), SORTER])
    cases["searchsorted_scalar"] = (  # a stable sort: the unstable one is refused (ties)
        lambda q: torch.searchsorted(q.sort(stable=True).values, 0.25, right=True), [SEQ])
    cases["as_strided_scatter"] = (
        lambda x, s: torch.as_strided_scatter(x, s, (2, 3), (8, 2), 1), [torch.randn(4, 6, generator=_g),
                                                                      torch.randn(2, 3, generator=_g)])
    ml_target = torch.tensor([[3, 0, -1, 1], [1, -1, 0, 0], [0, 1, 2, 3]])  # rows end early
    for red in (0, 1, 2):  # none, mean, sum: PyTorch's decomposition gave other numbers
        cases[f"multilabel_margin_loss_{red}"] = (
            lambda x, t, r=red: torch.ops.aten.multilabel_margin_loss_forward(x, t, r),
            [torch.randn(3, 4, generator=_g), ml_target])
    cases["multilabel_margin_loss_1d"] = (
        lambda x, t: torch.ops.aten.multilabel_margin_loss_forward(x, t, 0),
        [torch.randn(4, generator=_g), ml_target[0]])
    return cases


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_index_reduction_compiles_to_eagers_numbers(name: str) -> None:
    fn, inputs = CASES[name]
    assert_compiles_to_eager(fn, inputs, rtol=1e-5, atol=1e-6, equal_nan=True, name=name)


def test_embedding_max_norm_renormalizes_the_named_rows_in_place_like_eager() -> None:
    import torch.nn.functional as F

    w = torch.randn(7, 4, generator=_g) * 2
    idx = torch.tensor([[1, 3], [3, 6]])

    def fn(i: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.embedding(i, weight, max_norm=1.5)

    w_eager, w_comp = w.clone(), w.clone()
    want = fn(idx, w_eager)
    got = compile_graph(fn, [idx, w.clone()]).run([idx, w_comp])[0]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(w_comp, w_eager)  # rows 1, 3, 6 scaled, the rest untouched


def test_take_with_a_0d_index_and_embedding_flags() -> None:
    x, i = torch.randn(3, 4, generator=_g), torch.tensor(-2)
    assert torch.equal(compile_graph(torch.take, [x, i]).run([x, i])[0], torch.take(x, i))
    w, idx = torch.randn(5, 3, generator=_g), torch.tensor([[0, 4], [4, 2]])

    def emb(j: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(j, weight, scale_grad_by_freq=True)

    assert torch.equal(compile_graph(emb, [idx, w]).run([idx, w])[0], emb(idx, w))


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "max", "min"])
def test_segment_reduce_with_empty_segments_and_batches(reduce: str) -> None:
    data = torch.randn(3, 6, 2, generator=_g)
    lengths = torch.tensor([[2, 0, 4], [1, 1, 4], [0, 6, 0]])
    offsets = torch.tensor([0, 2, 2, 6])
    cases = [
        (lambda d, n: torch.segment_reduce(d, reduce, lengths=n, axis=1), [data, lengths]),
        (lambda d, n: torch.segment_reduce(d, reduce, lengths=n, axis=1, initial=0.5), [data, lengths]),
        (lambda d, o: torch.segment_reduce(d[0], reduce, offsets=o, axis=0), [data, offsets]),
    ]
    for fn, inputs in cases:  # eager's bits: its loop folds a segment in order
        bits_equal(compile_graph(fn, inputs).run(inputs)[0], fn(*inputs))


def test_nonzero_static_and_masked_row_assignment() -> None:
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    for size, fill in ((5, -1), (2, 0), (0, -1)):
        def nz(t: torch.Tensor, s: int = size, f: int = fill) -> torch.Tensor:
            return torch.nonzero_static(t, size=s, fill_value=f)

        assert torch.equal(compile_graph(nz, [x]).run([x])[0], nz(x))
    base, mask, row = torch.randn(5, 3, generator=_g), torch.tensor([True, False, True, True, False]), \
        torch.randn(3, generator=_g)
    for acc in (False, True):
        def put(b: torch.Tensor, m: torch.Tensor, r: torch.Tensor, a: bool = acc) -> torch.Tensor:
            return torch.index_put(b, (m,), r, accumulate=a)

        torch.testing.assert_close(compile_graph(put, [base, mask, row]).run([base, mask, row])[0],
                                   put(base, mask, row))


# -- out-of-range indices raise eager's error (compiler/index_bounds.py) ---------------------

_W = torch.randn(3, 4, generator=_g)
# name -> (fn(x, i), an index in range, one out of range); ``i`` indexes dim 0 unless said
_RANGE_CASES: dict[str, tuple[Callable[..., Any], list[int], list[int]]] = {
    "index": (lambda x, i: x[i], [0, -3], [0, 3]),
    "index_negative": (lambda x, i: x[i], [2, -1], [0, -4]),
    "index_second_dim": (lambda x, i: x[:, i], [3, -4], [0, 4]),
    "index_put": (lambda x, i: x.index_put((i,), torch.tensor(1.0)), [0, -1], [0, 3]),
    "index_put_accumulate": (lambda x, i: x.index_put((i,), torch.tensor(1.0), accumulate=True),
                             [-1, -1], [-5, 1]),
    "take": (torch.take, [11, -12], [0, 12]),
    "put": (lambda x, i: x.put(i, torch.ones(2)), [11, -12], [0, -13]),
    "gather": (lambda x, i: torch.gather(x, 1, i.reshape(1, 2).expand(3, 2)), [3, 0], [0, 4]),
    "gather_negative": (lambda x, i: torch.gather(x, 0, i.reshape(2, 1)), [2, 0], [-1, 0]),
    "scatter": (lambda x, i: x.scatter(0, i.reshape(2, 1), 7.0), [2, 0], [0, 3]),
    "scatter_add": (lambda x, i: x.scatter_add(0, i.reshape(2, 1).expand(2, 4), torch.ones(2, 4)),
                    [2, 2], [5, 0]),
    "index_select": (lambda x, i: torch.index_select(x, 0, i), [2, 0], [0, -1]),
    "embedding": (lambda x, i: torch.nn.functional.embedding(i, x), [2, 1], [3, 1]),
    "index_add": (lambda x, i: x.index_add(0, i, torch.ones(2, 4)), [2, 0], [0, 3]),
    "index_copy": (lambda x, i: x.index_copy(0, i, torch.ones(2, 4)), [2, 0], [0, 3]),
    "index_fill": (lambda x, i: x.index_fill(0, i, 2.0), [-3, 2], [-4, 0]),
    # class targets: ``i`` names a class (dim 1 of x[:2], 4 classes)
    "nll_loss": (lambda x, i: F.nll_loss(x[:2], i), [3, 0], [0, 4]),
    "nll_loss_ignore_index": (lambda x, i: F.nll_loss(x[:2], i, reduction="none"),
                              [-100, 1], [-100, -1]),
    "nll_loss_own_ignore_index": (lambda x, i: F.nll_loss(x[:2], i, ignore_index=9), [9, 1],
                                  [9, -100]),
    "nll_loss2d": (lambda x, i: F.nll_loss(x.reshape(1, 3, 2, 2)[:, :, :1],
                                           i.reshape(1, 1, 2)), [2, -100], [0, 3]),
    "cross_entropy": (lambda x, i: F.cross_entropy(x[:2], i), [3, -100], [5, 0]),
}


def _eager_error(fn: Callable[..., Any], *args: torch.Tensor) -> BaseException:
    with pytest.raises(Exception) as info:  # noqa: PT011 - whichever type eager raises
        fn(*args)
    return info.value


@pytest.mark.parametrize("computed", [False, True], ids=["input_index", "computed_index"])
@pytest.mark.parametrize("name", sorted(_RANGE_CASES))
def test_an_out_of_range_index_raises_eagers_error(name: str, computed: bool) -> None:
    """The index as a graph input, or computed in the graph (``i + k``): in range, the
    executable gives eager's numbers; out of range, eager's exception type and message."""
    op, good, bad = _RANGE_CASES[name]
    fn = (lambda x, i, k: op(x, i + k)) if computed else op
    x = _W.clone()
    extra = [torch.tensor(0)] if computed else []
    exe = compile_graph(fn, [x, torch.tensor(good), *extra], name=name)
    got, want = exe.run([x.clone(), torch.tensor(good), *extra]), fn(x, torch.tensor(good), *extra)
    torch.testing.assert_close(got[0], want)
    expected = _eager_error(fn, x, torch.tensor(bad), *extra)
    x_compiled = x.clone()
    with pytest.raises(type(expected)) as info:
        exe.run([x_compiled, torch.tensor(bad), *extra])
    assert str(info.value).startswith(str(expected))
    assert torch.equal(x_compiled, x)  # raised before any write into an input


def test_an_index_input_adds_no_device_work() -> None:
    """The check of an index that is a graph input is the host's: the program (StableHLO,
    and so the simulated time) is the one compiled without checks."""
    from torchneuron.compiler.prepare.index_bounds import without_index_checks

    def fn(w: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(i, w).sum(0)

    inputs = [_W, torch.tensor([0, 2])]
    checked = compile_graph(fn, inputs)
    with without_index_checks():
        plain = compile_graph(fn, inputs)
    assert checked.signature["index_checks"] == [["input", 1, 0, 3, 0, "in_self"]]
    assert "index_checks" not in plain.signature
    assert checked.stablehlo == plain.stablehlo and checked.device_ns == plain.device_ns


def test_decompositions_own_gathers_are_not_checked() -> None:
    """``max_pool2d_with_indices_backward`` decomposes to a scatter-add of in-range indices
    it builds itself: only ops the program calls are checked."""
    x = torch.randn(1, 1, 4, 4, generator=_g)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.take(t, torch.tensor([1, 5]))

    assert len(compile_graph(fn, [x]).signature["index_checks"]) == 1
    y = torch.randn(1, 1, 4, 4, generator=_g, requires_grad=True)
    out, idx = torch.nn.functional.max_pool2d(y, 2, return_indices=True)

    def backward(g: torch.Tensor, t: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.max_pool2d_with_indices_backward(g, t, [2, 2], [2, 2], [0, 0],
                                                               [1, 1], False, i)

    exe = compile_graph(backward, [torch.ones_like(out), y.detach(), idx])
    assert "index_checks" not in exe.signature


def test_a_tracer_without_decomp_layers_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks rely on PyTorch's private ``decomp_layers``: were it renamed, tracing
    must fail (the graph then runs eagerly), not compile every index unchecked."""
    from torch.fx.experimental import proxy_tensor

    from torchneuron.compiler.prepare import index_bounds

    class RenamedTracerMode:  # PyTorch's mode after a rename of its counter
        decomposition_layers = 1

    monkeypatch.setattr(proxy_tensor, "get_proxy_mode", RenamedTracerMode)
    with pytest.raises(RuntimeError, match="index-range checks"):
        index_bounds._outermost()


def test_the_check_run_eagerly_on_the_device_launches_no_kernel() -> None:
    """Run op by op (Dynamo's eager fallback), the check is the host's, as in eager
    PyTorch: no kernel, no eager compile; it still raises eager's error."""
    from torchneuron.compiler.prepare.index_bounds import INDEX_BOUNDS
    from torchneuron.hardware import get_core

    i = torch.arange(10, device="neuron")
    core = get_core(0)
    core.synchronize()
    kernels, compiles = core.kernels, core.eager_compiles
    INDEX_BOUNDS(i, 0, 10, 0, "index")
    assert (core.kernels, core.eager_compiles) == (kernels, compiles)
    with pytest.raises(IndexError, match="index 9 is out of bounds for dimension 0 with size 9"):
        INDEX_BOUNDS(i, 0, 9, 0, "index")


def test_a_boolean_mask_with_a_value_per_element_is_refused_naming_index_put() -> None:
    """The backward of ``x[mask]`` puts one value per selected element
    (``index_put(zeros, [mask], grad, accumulate=True)``): where each lands depends on the
    mask's values. Torch-MLIR failed on it with an unknown size and the error blamed
    ``aten.tensor``, so adaptive eager never learned the op and every region holding it
    failed to compile again; now it is refused in prepare, naming ``aten.index_put``."""
    from torchneuron.compiler import CompileError

    x, m = torch.randn(4, 10, 5), torch.rand(4, 10) > 0.5
    v = torch.randn(int(m.sum()), 5)
    with pytest.raises(CompileError) as info:
        compile_graph(lambda x, m, v: torch.zeros_like(x).index_put_((m,), v, accumulate=True),
                      [x, m, v])
    assert (info.value.stage, info.value.reason, info.value.op) == (
        "prepare", "data-dependent", "aten.index_put")

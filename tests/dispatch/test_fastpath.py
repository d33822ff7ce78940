"""Eager dispatch's fast path: flat arguments without pytree, per-signature facts cached.

Why: the cache must be invisible. Every op must charge exactly what computing its work
and cost afresh charges (the zoo's loops are pinned in ``hardware/test_sim_times.py``;
here single ops whose costs differ only in what the key must capture), and rebuilding
arguments must give what pytree gives.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_flatten

from torchneuron.dispatch import fastpath
from torchneuron.hardware import get_core
from torchneuron.hardware import reset as reset_cores


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((torch.ones(2), 3, 1.5), {}),
        (([torch.ones(2), torch.zeros(3)], (1, 2), None), {"alpha": 2.0}),
        ((torch.ones(2),), {"dim": [0], "keepdim": True, "dtype": torch.float16}),
        ((), {}),
    ],
)
def test_flatten_matches_pytree_and_round_trips(args: tuple, kwargs: dict) -> None:
    flat, spec = fastpath.flatten(args, kwargs)
    assert all(a is b for a, b in zip(flat, tree_flatten((args, kwargs))[0], strict=True))
    rargs, rkwargs = fastpath.unflatten(flat, spec)
    assert len(rargs) == len(args) and list(rkwargs) == list(kwargs)
    for a, b in zip(rargs, args, strict=True):
        assert type(a) is type(b)
        assert a is b or (isinstance(a, (list, tuple)) and all(x is y for x, y in zip(a, b, strict=True)))


def test_nested_arguments_are_left_to_pytree() -> None:
    assert fastpath.flatten(([[torch.ones(1)]],), {}) is None
    assert fastpath.flatten(({"a": 1},), {}) is None


def test_key_ignores_float_values_but_not_shapes_ints_or_aliasing() -> None:
    a, b = torch.ones(4, 4), torch.ones(4, 4)
    add = torch.ops.aten.add.Tensor

    def key(*args: object, **kwargs: object) -> tuple | None:
        flat, spec = fastpath.flatten(args, kwargs)
        return fastpath.signature_key(add, flat, spec)

    assert key(a, b, alpha=0.5) == key(a, b, alpha=2.0)  # an optimizer's changing scalar
    assert key(a, b) != key(a, torch.ones(4, 1))  # shape
    assert key(a, b) != key(a, b.t().contiguous().t())  # strides
    assert key(a, b) != key(a, a)  # aliasing
    assert key(a, b, alpha=1) != key(a, b, alpha=2)  # ints are exact
    assert key(a, b, alpha=True) != key(a, b, alpha=1)  # bool is not int
    assert key(a, torch.ones(4, 4, dtype=torch.float16)) != key(a, b)  # dtype


def _charges(fn) -> dict:  # noqa: ANN001
    reset_cores()
    fn()
    core = get_core(0)
    core.synchronize()
    return {k: v for k, v in core.stats().items() if k.endswith("_ns") or k == "kernel_launches"}


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x + x,
        lambda x: x.mul_(0.5),
        lambda x: torch.cat([x, x, x]),
        lambda x: torch.nn.functional.conv2d(x.view(1, 1, 8, 8), torch.ones(2, 1, 3, 3, device=x.device), stride=2),
        lambda x: x.sum(0, keepdim=True),
        lambda x: x.double(),  # falls back to the host
        lambda x: x[x > 0],  # data-dependent result shape
        lambda x: torch._foreach_add([x, x], [x, x], alpha=0.25),
    ],
)
def test_cached_charges_equal_fresh_charges(op) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    x = torch.randn(8, 8)

    def run() -> None:
        op(x.clone().to("neuron"))

    fastpath.clear_cache()
    fresh = _charges(run)
    cached = _charges(run)  # every signature now hit
    assert fastpath.cache_info()["signatures"] > 0
    assert cached == fresh


def test_data_dependent_result_shapes_are_charged_by_their_own_size() -> None:
    """Same input signature, results of different sizes: each charged as if fresh."""
    many, few = torch.arange(64.0).view(8, 8), -torch.arange(64.0).view(8, 8)
    few[0, 0] = 1.0

    def run(x: torch.Tensor):  # noqa: ANN202
        return lambda: (lambda d: d[d > 0])(x.to("neuron"))

    fastpath.clear_cache()
    fresh_few = _charges(run(few))
    _charges(run(many))  # caches the signature with the large result
    assert _charges(run(few)) == fresh_few


def test_cache_is_bounded() -> None:
    info = fastpath.cache_info()
    assert info["maxsize"] == fastpath.CACHE_SIZE
    fastpath.clear_cache()
    for n in range(1, 40):
        torch.ones(n, device="neuron") + 1
    assert fastpath.cache_info()["signatures"] <= fastpath.CACHE_SIZE


@pytest.mark.parametrize(
    ("func", "args", "kwargs"),
    [
        (torch.ops.aten.add.Tensor, lambda n: (n(4, 4), n(4, 4)), {"alpha": 0.5}),
        (torch.ops.aten.add.Tensor, lambda n: ((x := n(4, 4)), x), {}),  # aliasing
        (torch.ops.aten.cat.default, lambda n: ([n(2, 3), n(1, 3)], 0), {}),
        (torch.ops.aten.sum.dim_IntList, lambda n: (n(4, 4), [0], True), {}),
        (torch.ops.aten.mul.Tensor, lambda n: (n(4, 4), torch.tensor(2.0)), {}),  # host scalar
        (torch.ops.aten.transpose.int, lambda n: (n(4, 4), 0, 1), {}),
        (torch.ops.aten.view.default, lambda n: (n(4, 4), [2, 8]), {}),
        (torch.ops.aten.var.correction, lambda n: (n(4, 4), [1], None), {"keepdim": True}),
    ],
)
def test_one_pass_key_is_the_general_paths_key(func, args, kwargs) -> None:  # noqa: ANN001
    """Both paths must file a signature under one key (else each keeps its own entry)."""
    from torchneuron.dispatch.oprecord import record

    rec = record(func)
    a = args(lambda *s: torch.randn(*s).to("neuron"))
    u = fastpath.unwrap(rec, a, kwargs)
    flat, spec = fastpath.flatten(tuple(u.uargs), u.ukwargs)
    assert u.key is not None
    assert u.key == fastpath.signature_key(rec, flat, spec)
    assert fastpath.unwrap(rec, a, kwargs, keyed=False).key is None


@pytest.mark.parametrize(
    ("func", "make"),
    [
        (torch.ops.aten.view.default, lambda x: (x, [16])),
        (torch.ops.aten.t.default, lambda x: (x,)),
        (torch.ops.aten.detach.default, lambda x: (x,)),
        (torch.ops.aten.expand.default, lambda x: (x[:1], [4, 4])),
        (torch.ops.aten.add.Tensor, lambda x: (x, x)),
        (torch.ops.aten.mm.default, lambda x: (x, x)),
        (torch.ops.aten.fill_.Scalar, lambda x: (x.clone(), 1.0)),
        (torch.ops.aten._local_scalar_dense.default, lambda x: (x[0, 0],)),
    ],
)
def test_metadata_only_ops_are_known_per_overload(func, make) -> None:  # noqa: ANN001
    """Dispatch skips the signature key of ops ``launches_kernel`` calls metadata-only:
    that must agree with the work computed from the actual arguments."""
    from torchneuron.hardware.eager_work import aten_kernel_work, launches_kernel

    args = make(torch.randn(4, 4))
    out = func(*args)
    assert launches_kernel(func) == (aten_kernel_work(func, args, {}, out) is not None)


def test_a_float64_view_still_falls_back() -> None:
    """Metadata-only ops take no signature key, but still honour the dtype fallback."""
    from torchneuron.dispatch import fallback_ops, reset_op_tracking

    x = torch.randn(4, 4, dtype=torch.float64).to("neuron")
    reset_op_tracking()
    y = x.t()
    assert fallback_ops().get("t") == 1
    assert torch.equal(y.cpu(), x.cpu().t())

"""The recorder's and the guard's fast paths give exactly what the general code gives.

Recording and replaying pay per op for describing the arguments, and each fast path
(a flat loop instead of the recursive ``describe``, a remembered region key) must be
indistinguishable from the general one: same descriptions, same templates, same keys.
"""

from __future__ import annotations

import math

import pytest
import torch

import torchneuron  # noqa: F401
from torchneuron.adaptive_eager import guard, lift, replay, signature
from torchneuron.adaptive_eager.recorder import static_of
from torchneuron.adaptive_eager.signature import (
    InputRef,
    OpSig,
    Static,
    Unsupported,
    describe,
    rebuild,
    region_key,
)


def _args() -> list[tuple[tuple, dict]]:
    x = torch.randn(3, 4, device="neuron")
    y = torch.randn(4, 3, device="neuron").t()
    return [
        ((x, y), {}),
        ((x, x), {}),  # the same tensor twice
        ((x, 1.0), {"alpha": -0.0}),  # -0.0 stays apart from 0.0
        ((x, float("nan"), float("inf")), {}),
        ((x, 2, True, None, "mean"), {}),  # int, bool, None, str
        (([x, y], [y, x], 0.5), {"alpha": 1}),  # flat tensor lists (foreach ops)
        ((x, [1, 2], (3, 4)), {"keepdim": False}),  # int lists and tuples
        ((x, []), {}),
        ((x,), {"dtype": torch.float16, "device": torch.device("neuron", 0)}),
        ((x,), {"memory_format": torch.contiguous_format, "layout": torch.strided}),
        (((x, (y, 2)),), {}),  # nested deeper than one level
        (([x, [y]],), {}),
        (({"a": x},), {}),
        (([x, 1.5, None],), {}),
    ]


@pytest.mark.parametrize("case", range(len(_args())))
def test_static_of_is_describe(case: int) -> None:
    args, kwargs = _args()[case]
    general: list[torch.Tensor] = []
    desc, template = describe((args, kwargs), general)
    (static, grad, autocast), fast_template, fast = static_of(torch.ops.aten.add.Tensor, args, kwargs)
    assert static == desc
    assert repr(static) == repr(desc)  # what region keys are made of
    assert (grad, autocast) == (torch.is_grad_enabled(), torch.is_autocast_enabled())
    assert len(fast) == len(general) and all(a is b for a, b in zip(fast, general, strict=True))
    assert repr(rebuild(fast_template, fast)) == repr(rebuild(template, general))
    assert repr(rebuild(fast_template, fast)) == repr((args, kwargs))


def test_static_of_refuses_host_tensors_like_describe() -> None:
    x = torch.randn(2, device="neuron")
    for args in [(x, torch.ones(2)), ([x, torch.ones(2)],)]:
        with pytest.raises(Unsupported):
            describe((args, {}), [])
        with pytest.raises(Unsupported):
            static_of(torch.ops.aten.add.Tensor, args, {})


def test_static_of_sees_grad_mode() -> None:
    x = torch.randn(2, device="neuron")
    with torch.no_grad():
        assert static_of(torch.ops.aten.neg.default, (x,), {})[0].grad is False
    assert static_of(torch.ops.aten.neg.default, (x,), {})[0].grad is True


def test_region_key_is_remembered_and_stable() -> None:
    x = torch.randn(2, device="neuron")
    sig = OpSig(torch.ops.aten.neg.default,
                Static(*static_of(torch.ops.aten.neg.default, (x,), {})[0], "single"),
                (InputRef("x", 0),), ())
    key = region_key((sig,))
    signature._region_keys.clear()
    assert region_key((sig,)) == key  # computed again: the same
    other = sig._replace(static=sig.static._replace(grad=False))  # grad mode off
    assert region_key((other,)) != key


def _guard_for(args: tuple, kwargs: dict) -> guard.OpGuard:
    func = torch.ops.aten.add.Tensor
    static, _template, tensors = static_of(func, args, kwargs)
    sig = OpSig(func, Static(*static, "single"), tuple(InputRef("x", j) for j in range(len(tensors))),
                (None,))
    return guard._guard(0, sig, set())


@pytest.mark.parametrize("case", range(len(_args())))
def test_guard_matches_what_was_recorded(case: int) -> None:
    args, kwargs = _args()[case]
    g = _guard_for(args, kwargs)
    tensors: list[torch.Tensor] = []
    template = guard.match(g, args, kwargs, tensors)
    _static, expected, general = static_of(torch.ops.aten.add.Tensor, args, kwargs)
    assert template is not None
    assert all(a is b for a, b in zip(tensors, general, strict=True))
    assert repr(rebuild(template, tensors)) == repr(rebuild(expected, general))


def test_guard_refuses_what_the_general_check_refuses() -> None:
    x = torch.randn(3, 4, device="neuron")
    y = torch.randn(4, 3, device="neuron").t()  # same shape as x, other strides
    z = torch.randn(3, 4, device="neuron", dtype=torch.float64)
    recorded = (x, 1.0, [1, 2], True), {"alpha": -0.0}
    g = _guard_for(*recorded)
    changed = [
        ((y, 1.0, [1, 2], True), {"alpha": -0.0}),  # strides
        ((z, 1.0, [1, 2], True), {"alpha": -0.0}),  # dtype
        ((x[1:], 1.0, [1, 2], True), {"alpha": -0.0}),  # shape and offset
        ((x, 1.5, [1, 2], True), {"alpha": -0.0}),  # a float's value
        ((x, 1.0000000000000002, [1, 2], True), {"alpha": -0.0}),  # the next float
        ((x, float("nan"), [1, 2], True), {"alpha": -0.0}),  # NaN for a number
        ((x, 1, [1, 2], True), {"alpha": -0.0}),  # int for float
        ((x, 1.0, [1, 3], True), {"alpha": -0.0}),  # a list item
        ((x, 1.0, (1, 2), True), {"alpha": -0.0}),  # tuple for list
        ((x, 1.0, [1, 2, 3], True), {"alpha": -0.0}),  # list length
        ((x, 1.0, [1, 2], 1), {"alpha": -0.0}),  # int for bool
        ((x, 1.0, [1, 2], True), {"alpha": 0.0}),  # 0.0 for -0.0
        ((x, 1.0, [1, 2], True), {}),  # a keyword missing
        ((x, 1.0, [1, 2], True), {"beta": -0.0}),  # another keyword
        ((x, 1.0, [1, 2]), {"alpha": -0.0}),  # an argument missing
    ]
    for args, kwargs in changed:
        assert static_of(torch.ops.aten.add.Tensor, args, kwargs)[0] != g.static
        assert guard.match(g, args, kwargs, []) is None, (args, kwargs)
    with torch.no_grad():
        assert guard.match(g, *recorded, []) is None
    assert guard.match(g, *recorded, []) is not None
    # floats are compared by value, but zero's sign and NaN by repr, as described
    g = _guard_for((x, float("nan"), [1, 2], True), {"alpha": 0.0})
    assert guard.match(g, (x, float("nan"), [1, 2], True), {"alpha": 0.0}, []) is not None
    assert guard.match(g, (x, 1.0, [1, 2], True), {"alpha": 0.0}, []) is None
    assert guard.match(g, (x, float("nan"), [1, 2], True), {"alpha": -0.0}, []) is None


def test_guards_of_one_shape_share_their_code_and_namespace_not_their_values() -> None:
    """Guards whose checks read the same share one code object and one global namespace
    (the interpreter keeps its global lookups only for the namespace it saw last: a
    namespace per guard made every check miss them), each with its own expected values."""
    x = torch.randn(3, 4, device="neuron")
    y = torch.randn(4, 3, device="neuron").t()
    gx = _guard_for((x, x, 2.0), {})
    gy = _guard_for((y, y, 3.0), {})
    assert gx.check.__code__ is gy.check.__code__
    assert gx.check.__globals__ is gy.check.__globals__
    assert guard.match(gx, (x, x, 2.0), {}, []) is not None
    assert guard.match(gy, (y, y, 3.0), {}, []) is not None
    assert guard.match(gx, (y, y, 3.0), {}, []) is None
    assert guard.match(gy, (x, x, 2.0), {}, []) is None
    assert guard.match(gx, (x, x, 3.0), {}, []) is None


@pytest.mark.parametrize("n", [0, 1, 3])
def test_region_key_hashes_the_printed_signature(n: int) -> None:
    import hashlib

    x = torch.randn(2, device="neuron")
    sig = OpSig(torch.ops.aten.neg.default,
                Static(*static_of(torch.ops.aten.neg.default, (x,), {})[0], "single"),
                (InputRef("x", 0),), ())
    sigs = (sig,) * n
    signature._region_keys.clear()
    signature._sig_texts.clear()
    assert region_key(sigs) == hashlib.sha256(repr(sigs).encode()).hexdigest()[:24]


def test_guard_takes_any_float_where_a_scalar_is_lifted() -> None:
    # what ``lift.guard`` takes at a lifted position (a float, any value), the quick check
    # takes too, handing the value on; anything else is left to the general check
    x = torch.randn(3, 4, device="neuron")
    func = torch.ops.aten.add.Tensor
    static, _template, tensors = static_of(func, (x, x), {"alpha": 0.5})
    desc = ("U", (static.args[1][0], ("K", (("alpha", (lift.MARK, 0)),))))
    sig = OpSig(func, Static(desc, static.grad, static.autocast, "single"),
                (InputRef("x", 0), InputRef("x", 0)), (None,))
    g = guard._guard(0, sig, set())
    got: list = []
    assert guard.match(g, (x, x), {"alpha": -2.5}, [], got) is not None
    assert got == [(0, -2.5)] and type(got[0][1]) is float  # the value (replay._accept)
    values: dict = {}
    assert replay._accept(got, values, [torch.float32]) and values == {0: -2.5}
    assert not lift.accept([(0, "1e39")], {}, [torch.float32])  # beyond float32: eager raises
    for alpha in (2, True, None):
        assert guard.match(g, (x, x), {"alpha": alpha}, [], []) is None
        assert not lift.guard(static_of(func, (x, x), {"alpha": alpha})[0], g.static,
                              ((("k", "alpha"), 0),), {}, [torch.float32])


def test_guard_flat_check_covers_plain_arguments() -> None:
    # the flat check (a constant template, floats put in from the call) serves every
    # case of ``_args`` without nesting, a dict or a float inside a list; the others are
    # walked: both are compared with the general check above
    flat = [case for case in range(len(_args())) if _guard_for(*_args()[case]).flat is not None]
    assert flat == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    x = torch.randn(3, 4, device="neuron")
    g = _guard_for((x, 1.0), {"alpha": -0.0})
    assert guard.match(g, (x, 1.0), {"alpha": -0.0}, []) is g.template  # constant
    assert repr(g.template[1]["alpha"]) == "-0.0"
    nan = float("nan")
    g = _guard_for((x, nan), {"dtype": torch.float16})
    t1 = guard.match(g, (x, -nan), {"dtype": torch.float16}, [])
    assert t1 is not None and t1 is not g.template and t1[1] is not g.template[1]
    assert t1[0][1] is not nan and math.copysign(1.0, t1[0][1]) == -1.0  # the call's NaN
    assert t1[1]["dtype"] is torch.float16


@pytest.mark.parametrize("dtypes", [[], [torch.float32] * 3, [torch.float64, torch.float32, torch.float64]])
def test_scalar_inputs_round_as_torch_tensor(dtypes: list) -> None:
    values = {n: v for n, v in enumerate([1 / 3, -0.0, float("nan"), 1e-40][:len(dtypes)])}
    got = lift.scalar_inputs(dtypes, values)
    assert len(got) == len(dtypes)
    for n, (t, d) in enumerate(zip(got, dtypes, strict=True)):
        want = torch.tensor(values[n], dtype=d)
        assert t.dtype is d and t.dim() == 0
        bits = torch.int32 if d is torch.float32 else torch.int64
        assert t.view(bits).item() == want.view(bits).item()

"""Lifted float scalars: regions whose instances differ only in float arguments replay
with each step's values, exactly as eager computes them; what cannot be lifted exactly is
refused."""

from __future__ import annotations

import pytest
import torch

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import assert_same, run
from torchneuron.adaptive_eager.lift import Lifter
from torchneuron.hardware import settings

aten = torch.ops.aten
STEPS = 7


def _sig(func: object, args: tuple, kwargs: dict | None = None) -> tuple:
    """A one-entry region signature, described as the recorder describes it."""
    from torchneuron.adaptive_eager.signature import OpSig, Static, describe

    tensors: list = []
    desc, _ = describe((args, kwargs or {}), tensors)
    return (OpSig(func, Static(desc, True, False, "single"), (), ()),)


def _lifts(func: object, make) -> tuple | None:  # noqa: ANN001
    """The lifted signature after two instances whose float differs, or None (refused);
    ``make(v)`` returns (args, kwargs)."""
    lifter = Lifter()
    lifter.lift(_sig(func, *make(0.5)))
    lifted, also_seen = lifter.lift(_sig(func, *make(0.25)))
    assert also_seen == (lifted is not None)
    return lifted


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_operands_of_float_tensors_are_lifted(dtype: torch.dtype) -> None:
    t = torch.ones(3, dtype=dtype, device="neuron")
    assert _lifts(aten.div.Tensor, lambda v: ((t, v), {})) is not None
    assert _lifts(aten.addcdiv_.default, lambda v: ((t, t, t), {})) is None  # nothing changes
    lifted = _lifts(aten.addcdiv_.default, lambda v: ((t, t, t), {"value": v}))
    assert lifted is not None and "('lifted', 0)" in repr(lifted)
    assert _lifts(aten.add_.Tensor, lambda v: ((t, t), {"alpha": v})) is not None
    assert _lifts(aten.lerp_.Scalar, lambda v: ((t, t, v), {})) is not None


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float16, torch.bfloat16])
def test_other_dtypes_are_refused(dtype: torch.dtype) -> None:
    # integer/bool tensors promote to float with a float operand; half and bfloat16
    # compute in float32 with the unrounded scalar: a 0-d tensor would differ
    t = torch.ones(3, device="neuron").to(dtype)
    assert _lifts(aten.mul.Tensor, lambda v: ((t, v), {})) is None
    assert _lifts(aten.add.Tensor, lambda v: ((t, t), {"alpha": v})) is None


def test_int_scalars_and_unlisted_ops_are_not_lifted() -> None:
    t = torch.ones(3, device="neuron")
    lifter = Lifter()
    lifter.lift(_sig(aten.mul.Tensor, (t, 2)))
    assert lifter.lift(_sig(aten.mul.Tensor, (t, 3)))[0] is None  # ints: a new region
    assert _lifts(aten.clamp.default, lambda v: ((t, v), {})) is None  # not in the table
    assert _lifts(aten.pow.Tensor_Scalar, lambda v: ((t, v), {})) is None
    i = torch.ones(3, dtype=torch.int64, device="neuron")
    # a float tensor plus an int tensor scaled by a float alpha: mixed dtypes, refused
    assert _lifts(aten.add.Tensor, lambda v: ((t, i), {"alpha": v})) is None


_OPS = {
    "div": lambda w, a, b, v: w.copy_(a / v),
    "mul_": lambda w, a, b, v: w.mul_(v),
    "add_alpha": lambda w, a, b, v: w.add_(a, alpha=v),
    "sub_alpha": lambda w, a, b, v: w.copy_(torch.sub(a, b, alpha=v)),
    "addcmul_": lambda w, a, b, v: w.addcmul_(a, b, value=v),
    "addcdiv_": lambda w, a, b, v: w.addcdiv_(a, b.abs() + 1, value=-v),
    "lerp_": lambda w, a, b, v: w.lerp_(a, v),  # weights on both sides of 0.5
}


def _loop(name: str, dtype: torch.dtype):
    def loop(device: str) -> dict:
        g = torch.Generator().manual_seed(11)
        w = torch.randn(16, 8, generator=g, dtype=dtype).to(device)
        a = torch.randn(16, 8, generator=g, dtype=dtype).to(device)
        b = torch.randn(16, 8, generator=g, dtype=dtype).to(device)
        sums = []
        for step in range(STEPS):
            v = [0.3, 0.7, 0.1, 0.9, 0.45, 0.55, 0.2][step] * (1.0 + step / 10)
            h = (a * 0.5).tanh() + b
            _OPS[name](w, h, b, v)
            w.mul_(0.9).add_(h.sin())
            sums.append(w.sum().item())
        return {"w": w, "sums": torch.tensor(sums, dtype=torch.float64)}
    return loop


@pytest.mark.parametrize("name", sorted(_OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lifted_op_replays_and_matches_eager(name: str, dtype: torch.dtype) -> None:
    with settings.override(ae_min_gain_ns=0):
        eager = run(_loop(name, dtype), "neuron")
        adaptive = run(_loop(name, dtype), "neuron", adaptive=True)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    assert_same(eager, adaptive, **tol)
    assert_same(run(_loop(name, dtype), "cpu"), adaptive, **tol)
    lifted = [r for r in ae.regions() if r.plan is not None and r.plan.lifted and r.replays]
    assert lifted, ae.explain()
    assert all(d == dtype for r in lifted for d in r.plan.lifted)
    assert "%s0" in lifted[0].format()


def test_scalar_out_of_float32_range_raises_eagers_error() -> None:
    # ATen refuses to convert a Scalar that overflows float32; a lifted 0-d tensor would
    # hold inf instead, so the guard sends that step to eager, which raises
    def loop(device: str) -> dict:
        g = torch.Generator().manual_seed(13)
        w = torch.randn(16, 8, generator=g).to(device)
        a = torch.randn(16, 8, generator=g).to(device)
        sums, errors = [], []
        for step in range(STEPS):
            v = 1e39 if step == 5 else 0.1 * (step + 1)
            try:
                h = (a * 0.5).tanh()
                w.addcdiv_(h, h.abs() + 1, value=v)
                w.mul_(0.9).add_(h.sin())
                sums.append(w.sum().item())
            except RuntimeError as e:
                errors.append(f"{type(e).__name__}: {str(e).splitlines()[0]}")
        return {"w": w, "sums": torch.tensor(sums), "_errors": errors}

    with settings.override(ae_min_gain_ns=0):
        eager = run(loop, "neuron")
        adaptive = run(loop, "neuron", adaptive=True)
    assert len(eager["_errors"]) == 1 and adaptive["_errors"] == eager["_errors"]
    assert_same(eager, adaptive)
    assert ae.stats()["side_exits"] >= 1 and ae.stats()["replays"] >= 1, ae.explain()


class _Counted(tuple):
    """An op stand-in that counts its hashes."""

    hashes = 0

    def __hash__(self) -> int:
        _Counted.hashes += 1
        return tuple.__hash__(self)


def test_a_skeleton_hashes_by_its_ops_values_each_op_once() -> None:
    """Skeletons of equal ops are one key of the lifter's table, whatever objects the
    ops are; a new skeleton of ops hashed before (a step whose floats changed) does not
    hash its ops again."""
    from torchneuron.adaptive_eager import lift

    ops = [_Counted((i, ("T", ((4, 8), (8, 1), 0, torch.float32)))) for i in range(50)]
    a = lift._Skeleton(ops)
    _Counted.hashes = 0
    table = {a: "state"}
    assert _Counted.hashes == 50
    b = lift._Skeleton(ops)  # a new skeleton of the same ops
    assert table[b] == "state" and _Counted.hashes == 50
    c = lift._Skeleton(_Counted(tuple(op)) for op in ops)  # equal ops, other objects
    assert table[c] == "state" and hash(c) == hash(a)
    d = lift._Skeleton([*ops[:-1], _Counted((49, ("T", ((4, 8), (8, 1), 0, torch.float16))))])
    assert d not in table

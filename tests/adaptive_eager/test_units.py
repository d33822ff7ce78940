"""Small units: the printable region, its named signature records, the state machine, reasons, settings, the
native_dropout decomposition on non-contiguous inputs (draws in memory order)."""

from __future__ import annotations

import pytest
import torch

import torchneuron.adaptive_eager as ae
from torchneuron.adaptive_eager import signature
from torchneuron.adaptive_eager.region import IllegalTransition, Region, State
from torchneuron.adaptive_eager.signature import (
    InputRef,
    Meta,
    NewOut,
    OpSig,
    SameOut,
    Static,
    ValueRef,
    ViewOut,
    region_key,
)
from torchneuron.compiler.decomp.dropout import native_dropout
from torchneuron.hardware import settings


def test_recorded_region_prints_one_op_per_line() -> None:
    w = torch.ones(2, 4).to("neuron")
    with ae.enabled():
        for _ in range(2):
            x = torch.ones(3, 2).to("neuron")
            y = (x @ w).relu().sum()
            y.item()
    region = max(ae.regions(), key=len)
    assert region.format() == (
        "$0: f32[3, 4] = aten.mm.default($in0, $in1)\n"
        "$1: f32[3, 4] = aten.relu.default($0)\n"
        "$2: f32[] = aten.sum.default($1)"
    )
    assert region.times_seen == 2


def _plain(x: object) -> object:
    """``x`` with every tuple (named ones too) a plain tuple."""
    return tuple(_plain(v) for v in x) if isinstance(x, tuple) else x


def test_recorded_signature_is_named_records() -> None:
    """What each op of a region reads and makes, as the recorder names it: a value made
    earlier (op, output), an input slot in order of first use, and outputs that are new,
    an argument itself (in place) or a view of one; the key is the plain tuples' key."""
    x = torch.ones(2, 3).to("neuron")
    y = torch.full((2, 3), 2.0).to("neuron")
    with ae.enabled():
        for _ in range(2):
            z = x * 2 + y
            z.add_(x)
            z.view(-1).sum().item()
    region = max(ae.regions(), key=len)
    sigs = region.sigs
    aten = torch.ops.aten
    assert [s.func for s in sigs] == [aten.mul.Tensor, aten.add.Tensor, aten.add_.Tensor,
                                      aten.view.default, aten.sum.default]
    assert all(type(s) is OpSig and type(s.static) is Static for s in sigs)
    assert sigs[0].refs == (InputRef("x", 0),) and type(sigs[0].refs[0]) is InputRef
    assert [type(r) for r in sigs[1].refs] == [ValueRef, InputRef]
    assert (sigs[1].refs[0].op, sigs[1].refs[0].output, sigs[1].refs[1].index) == (0, 0, 1)
    assert sigs[2].refs == (ValueRef("v", 1, 0), InputRef("x", 0))
    assert [type(o) for s in sigs for o in s.outs] == [NewOut, NewOut, SameOut, ViewOut, NewOut]
    assert sigs[2].outs[0].arg == 0 and sigs[3].outs[0].arg == 0
    view = sigs[3].outs[0].meta
    assert type(view) is Meta and (view.shape, view.stride, view.dtype) == ((6,), (1,), torch.float32)
    assert sigs[4].static.result == "single" and sigs[0].static.grad is torch.is_grad_enabled()
    signature._region_keys.clear()
    signature._sig_texts.clear()
    assert region.key == region_key(_plain(sigs))


def test_state_machine_rejects_illegal_transitions_and_blacklists() -> None:
    r = Region("k", ())
    with pytest.raises(IllegalTransition):
        r.to(State.READY)
    r.to(State.HOT)
    r.to(State.COMPILING)
    r.to(State.READY)
    for _ in range(4 * 2):
        r.to(State.REPLAYING)
        r.record_exit(ae.Reason.GUARD_MISMATCH, 1, exits_before_backoff=2, backoff_starts=1)
        if r.state is State.BLACKLISTED:
            break
    assert r.state is State.BLACKLISTED and r.backoffs == 4
    assert "blacklisted" in r.explain()


def test_every_reason_has_a_message() -> None:
    assert all(len(reason.message) > 20 for reason in ae.Reason)


def test_settings_rows_have_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHNEURON_AE_HOT_THRESHOLD", "7")
    settings.reset()
    try:
        assert settings.get_value("ae_hot_threshold") == 7
    finally:
        monkeypatch.delenv("TORCHNEURON_AE_HOT_THRESHOLD")
        settings.reset()
    assert settings.get_value("ae_hot_threshold") == 2
    assert "TORCHNEURON_ADAPTIVE_EAGER" in settings.describe()


@pytest.mark.parametrize("make", [lambda t: t, lambda t: t.transpose(0, 1),
                                  lambda t: t.permute(2, 0, 1)])
def test_native_dropout_decomposition_draws_like_aten(make) -> None:  # noqa: ANN001
    x = make(torch.randn(6, 5, 4))
    torch.manual_seed(0)
    ref_out, ref_mask = torch.ops.aten.native_dropout.default(x, 0.3, True)
    torch.manual_seed(0)
    out, mask = native_dropout(x, 0.3, True)
    assert torch.equal(mask, ref_mask)
    torch.testing.assert_close(out, ref_out)

"""The replay sweep for CI: representative OpInfo ops and ModuleInfo modules inside regions
adaptive eager compiled and replays, against eager on the device.

Every step's results are judged bit for bit against eager (the sign of zeros included,
NaN payloads aside), reductions, matmuls and modules' gradients as elementwise ops.

Why a subset: the full sweeps (``python tools/replay_sweep.py ops`` / ``modules``) run
every op and module of PyTorch's databases and take long; CI needs the families where a
capture goes wrong first -- elementwise ops, reductions, matmuls
(with an empty operand), views, in-place variants, index ops, scalars read back with
``item``, an op refused for its data-dependent shape, normalization with running stats,
recurrent and attention modules -- through the sweep's own checker, so the two cannot
drift apart. Each must PASS (a program replayed, every step equal to eager) or be
REFUSED (typed, run eagerly, equal to eager): a MISMATCH or an ERROR fails.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import replay_sweep  # noqa: E402
from opinfo_device import find_ops, op_id  # noqa: E402

import torchneuron.adaptive_eager.replay as replay_mod  # noqa: E402
from torchneuron.hardware.settings import override  # noqa: E402

# op -> the verdicts its samples may have (PASS only, unless the compiler refuses it)
OPS = {
    "sin": {"PASS"}, "add": {"PASS"}, "mul": {"PASS"}, "div.no_rounding_mode": {"PASS"},
    "where": {"PASS"}, "sum": {"PASS"}, "amax": {"PASS"}, "cumsum": {"PASS"},
    "mm": {"PASS"}, "transpose": {"PASS"}, "index_select": {"PASS"},
    "softmax": {"PASS"}, "nn.functional.layer_norm": {"PASS"},
    "item": {"PASS"}, "nonzero": {"REFUSED"}, "view_as_complex": {"REFUSED"},
    # decomposed by PyTorch before the compiler's table: run between regions
    "nn.functional.binary_cross_entropy_with_logits": {"REFUSED"},
}  # fmt: skip
MODULES = ["nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.GRU", "nn.MultiheadAttention"]
SAMPLES = 1  # per op (its first sample; the full sweep spreads six)
MODULE_SAMPLES = 1
# nn.GRU's sample (input and hidden size 2) must replay too: its six weights share one
# shape, so the 2-op region (t, mm) of a hidden projection begins, at the same ``t``, the
# input projection (t, view, ...) and layer 1's first step, whose h0 sits at another
# storage offset (a real guard: another input layout). Those side exits are learned as
# variants (a one-op variant too) from the ops met there, steps after its first replay.


@pytest.fixture(autouse=True)
def sweep_settings() -> Iterator[None]:
    with override(**replay_sweep.sweep_settings()):
        yield


_OPS = {op_id(o): o for o in find_ops(list(OPS))}


def _verdicts(r: dict[str, Any]) -> set[str]:
    return {v for v, n in r["samples"].items() if n}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_under_replay_equals_eager(name: str) -> None:
    r = replay_sweep.check_op(_OPS[name], samples=SAMPLES)
    assert _verdicts(r) and _verdicts(r) <= OPS[name], (name, r)


@pytest.mark.parametrize("name", MODULES)
def test_module_under_replay_equals_eager(name: str) -> None:
    info = {m.name: m for m in replay_sweep.find_modules([name])}[name]
    r = replay_sweep.check_module(info, samples=MODULE_SAMPLES)
    assert _verdicts(r) == {"PASS"}, (name, r)


def test_a_wrong_program_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker can fail: a program whose first float output is off by one."""
    real = replay_mod.launch

    def corrupt(*args: Any, **kwargs: Any) -> Any:
        outs = real(*args, **kwargs)
        for o in outs:
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel():
                o.add_(1.0)
                break
        return outs

    monkeypatch.setattr(replay_mod, "launch", corrupt)
    r = replay_sweep.check_op(_OPS["sin"], samples=1)
    assert r["status"] == "MISMATCH", r
    assert "replayed" in r["first"]["MISMATCH"], r


def _one_ulp_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every program's first float output one ulp above eager's (toward +inf)."""
    real = replay_mod.launch

    def corrupt(*args: Any, **kwargs: Any) -> Any:
        outs = real(*args, **kwargs)
        for o in outs:
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel():
                o.copy_(torch.nextafter(o, torch.full_like(o, float("inf"))))
                break
        return outs

    monkeypatch.setattr(replay_mod, "launch", corrupt)


def test_a_reduction_one_ulp_off_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reduction is judged bit for bit too (it was within a tolerance: this PASSed)."""
    _one_ulp_off(monkeypatch)
    r = replay_sweep.check_op(_OPS["sum"], samples=1)
    assert r["status"] == "MISMATCH", r
    assert "ulp" in r["first"]["MISMATCH"], r


def test_a_module_one_ulp_off_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module's outputs and gradients are judged bit for bit (they were within a
    tolerance: this PASSed)."""
    _one_ulp_off(monkeypatch)
    info = {m.name: m for m in replay_sweep.find_modules(["nn.Linear"])}["nn.Linear"]
    r = replay_sweep.check_module(info, samples=1)
    assert r["status"] == "MISMATCH", r


def test_not_replayed_is_not_a_pass() -> None:
    """A loop too short for a program replay is NOT-REPLAYED, with explain()'s reason."""
    with override(ae_hot_threshold=100):
        r = replay_sweep.check_op(_OPS["sin"], samples=1)
    assert r["status"] == "NOT-REPLAYED", r
    assert "region" in r["first"]["NOT-REPLAYED"], r


def test_empty_result_of_a_replay_ended_by_a_seed() -> None:
    """A zero-element value of a replayed region, ended early by ``manual_seed`` (an
    rng-state sync): its buffer is untracked although the value has no ``__dict__``."""
    import torchneuron.adaptive_eager as ae

    a = torch.randn(0, 3, device="neuron")
    b = torch.randn(3, 4, device="neuron")
    got = []
    with ae.enabled():
        for _ in range(replay_sweep.STEPS):
            out = a.clone() @ b.clone()
            torch.manual_seed(0)
            got.append(out.cpu())
    assert ae.stats()["replays"] > 0, ae.explain()
    want = (a @ b).cpu()
    for g in got:
        assert torch.equal(g, want)

"""An EMA of weights with foreach ops (``torch._foreach_mul_(ema, d)``,
``torch._foreach_add_(ema, params, alpha=1 - d)``) after each optimizer step.

Why: no ``_foreach_`` op had a lowering, so the EMA's ops were refused and ran eagerly
between regions on every step. Now adaptive eager replays them inside the step's region
and torch.compile compiles them, both with eager's bits (the float32 ``add`` with
``alpha`` is a fused multiply-add in eager: decomp_foreach.py).
"""

from __future__ import annotations

import torch
from torch import nn

import torchneuron.adaptive_eager as ae
from tests.compiler.exact import bits_equal
from torchneuron.compiler import stats as compiler_stats

STEPS, DECAY = 10, 0.99


def _setup(device: str) -> tuple[nn.Module, list[torch.Tensor], torch.optim.Optimizer]:
    """A model, its EMA (a copy of its parameters) and an optimizer."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    ema = [p.detach().clone() for p in model.parameters()]
    return model, ema, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _ema_update(ema: list[torch.Tensor], params: list[torch.Tensor]) -> None:
    torch._foreach_mul_(ema, DECAY)
    torch._foreach_add_(ema, params, alpha=1 - DECAY)


def _train(device: str, compiled: bool = False) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
    """Per step, the parameters the EMA read (on the CPU); and the EMA at the end."""
    model, ema, opt = _setup(device)
    update = torch.compile(_ema_update, backend="neuron") if compiled else _ema_update
    g = torch.Generator().manual_seed(1)
    seen = []
    for _ in range(STEPS):
        x = torch.randn(4, 8, generator=g).to(device)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            params = [p.detach() for p in model.parameters()]
            update(ema, params)
            seen.append([p.cpu() for p in params])
    return seen, [e.cpu() for e in ema]


def _check(seen: list[list[torch.Tensor]], ema: list[torch.Tensor]) -> None:
    """The EMA equals eager's foreach ops on the CPU over the parameters the run had,
    bit for bit (the parameters themselves follow the compiled training step, whose
    sums may be reassociated); and the parameters follow a CPU run closely."""
    _, want_ema = _setup("cpu")[:2]
    for params in seen:
        _ema_update(want_ema, params)
    for i, (g, w) in enumerate(zip(ema, want_ema, strict=True)):
        bits_equal(g, w, f"ema {i}")
    cpu_seen, _ = _train("cpu")
    for got, want in zip(seen[-1], cpu_seen[-1], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_ema_replays_inside_its_region_with_eagers_bits() -> None:
    with ae.enabled():
        seen, ema = _train("neuron")
    _check(seen, ema)
    s = ae.stats()
    assert s["refused_ops"] == {} and s["ops_between_regions"] == 0, ae.explain()
    replayed = [r for r in ae.regions() if r.replays > 0]
    assert replayed, ae.explain()
    ops = {str(sig.func) for r in replayed for sig in r.sigs}
    assert {"aten._foreach_mul_.Scalar", "aten._foreach_add_.List"} <= ops, ops


def test_ema_under_torch_compile() -> None:
    torch._dynamo.reset()
    failures = compiler_stats()["failures"]
    seen, ema = _train("neuron", compiled=True)
    _check(seen, ema)
    assert compiler_stats()["failures"] == failures

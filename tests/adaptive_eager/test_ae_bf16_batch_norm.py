"""A CNN with BatchNorm2d trained under bfloat16 autocast by adaptive eager (issue 20):
the region holding batch norm's backward compiles and replays, and the run keeps
eager's bits.

Before: that region failed to lower (ReLU's bfloat16 gradient needed a constant this
torch-mlir cannot print), one wasted compile per run, and it ran eagerly; compiled, its
loss was off eager's in the last bit (``nll_loss_forward``'s sum). The convolutions and
the forward batch norm are refused in bfloat16 (eager's bits depend on the CPU there)
and run eagerly between regions.
"""

from __future__ import annotations

import torch
from torch import nn

from torchneuron import adaptive_eager as ae
from torchneuron.hardware.settings import override

STEPS = 14  # three refusals found (a compile each), then the region with the backward


def _train(adaptive: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 8 * 8, 10)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 10, (4,), generator=g))
            for _ in range(STEPS)]
    losses = []
    if adaptive:
        ae.reset()
        ae.enable()
    try:
        for x, y in data:
            with torch.autocast("neuron", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x.to("neuron")).float(),
                                                   y.to("neuron"))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
    finally:
        if adaptive:
            ae.disable()
    return losses, [p.detach().cpu() for p in model.state_dict().values()]


def test_bf16_batch_norm_backward_region_replays_with_eagers_bits() -> None:
    with override(compile_latency=False, cache=False):
        want_losses, want_state = _train(adaptive=False)
        losses, state = _train(adaptive=True)
    for a, b in zip(losses, want_losses, strict=True):
        assert torch.equal(a, b), (losses, want_losses)
    for a, b in zip(state, want_state, strict=True):
        assert torch.equal(a, b)
    norm_grad = [r for r in ae.regions()
                 if any("native_batch_norm_backward" in str(s.func) for s in r.sigs)]
    assert norm_grad and any(r.replays > 0 for r in norm_grad), ae.explain()
    detail = " ".join(r.detail or "" for r in ae.regions())
    assert "LoweringError" not in detail, ae.explain()  # (the refusals are PrepareErrors)

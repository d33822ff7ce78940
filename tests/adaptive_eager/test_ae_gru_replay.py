"""A GRU training loop replays compiled programs, with eager CPU's bits.

Why: ``nn.GRU`` on the device takes the CPU's code path (``dispatch/recurrent.py``): each
time step's gates are column chunks of one (batch, 3 * hidden) matrix, updated in place
(``hg[0].add_(ig[0]).sigmoid_()``), and a region that starts inside a step takes those
chunks as separate inputs on one storage. Two checks refused them all as aliased
(``aliased-inputs``): the extents of interleaved chunks meet though they share no element
(``adaptive_eager/overlap.py`` now decides exactly), and every input an in-place op read
counted as written (``mul_``'s ``other`` too; ``capture.written_refs``). Once replayed,
the backward's ``sigmoid_backward`` was off by an ulp (PyTorch's decomposition multiplies
in another order than ATen's kernel; it is eager's kernel now, ``decomp/eager_kernels.py``).
Every step's loss,
every gradient and the final parameters must equal the same loop on plain CPU, and the
last steps must be program replays with no aliased-inputs exit where the chunks' rows let
eager's kernels take the executable's path (``overlap.whole_vector_rows``).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import ReplayLog, keep_step, kept, run
from torchneuron.hardware.settings import override

STEPS = 7


class _Net(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gru = nn.GRU(6, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1]).squeeze(-1)


def _loop(model: nn.Module, log: ReplayLog | None = None):
    def loop(device: str) -> dict[str, torch.Tensor]:
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        batches = [torch.randn(4, 5, 6, generator=g) for _ in range(2)]
        out: dict[str, list[torch.Tensor]] = {}
        for step in range(STEPS):
            x = batches[step % 2].to(device)
            y = x.sum(dim=(1, 2)) / 5
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            loss.item()  # a sync ends the step's region, as a logging loop does
            keep_step(out, loss, m)
            if log is not None:
                log.mark(step)
        return kept(out, m)
    return loop


@pytest.mark.parametrize("hidden", [32, 8])
def test_gru_training_replays_programs_with_eagers_bits(hidden: int) -> None:
    """hidden 32: the gate chunks' rows are whole vector pairs (128 bytes), eager's
    kernels run over them as over the executable's contiguous copies: the steps replay.
    hidden 8: chunks on one storage stay refused as aliased (``whole_vector_rows``); a
    region that writes one gate chunk in place (``add_(hg[1], ig[1]); sigmoid_``) runs
    eagerly (``short-rows-written``): eager's ``sigmoid_`` runs each 8-column row in its
    scalar loop, the program's values are contiguous (it replayed with other last bits)."""
    torch.manual_seed(0)
    model = _Net(hidden)
    cpu = run(_loop(model), "cpu")
    log = ReplayLog()
    with override(compile_latency=False, ae_first_tier=False, ae_min_gain_ns=0):
        got = run(_loop(model, log), "neuron", adaptive=True)
        reasons = dict(ae.stats()["fallback_reasons"])
        explained = ae.explain()
    if hidden == 32:
        assert "aliased-inputs" not in reasons, explained
        assert STEPS - 1 in log.program_steps, (log.program_steps, explained)
    differ = {k: f"{int((got[k] != v).sum())} of {v.numel()}" for k, v in cpu.items()
              if not k.startswith("_") and not torch.equal(got[k], v)}
    assert not differ, f"replayed steps differ from eager CPU: {differ}"

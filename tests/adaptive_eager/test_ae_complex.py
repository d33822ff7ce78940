"""A region holding complex values runs them between regions; the real ops around them replay.

Meta's Llama code applies rotary embeddings through ``view_as_complex``: a complex
multiply, then ``view_as_real``. Capture refuses complex values (the compiler does not
lower them exactly), and it refused the whole region: a Llama-style training step
replayed nothing but its optimizer (37 replays in 40 steps). Now the refusal names every
op of the region that reads or makes a complex value, and the runtime runs those between
regions (``refused._learn_complex``: ``view_as_complex`` in every call, ``mul`` only in its
calls with a complex value), so the attention, the MLP and their backward compile.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import ReplayLog, assert_replays_eagers_bits

T, D = 8, 16
_SEEN: dict[str, Any] = {}


def _rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(-2)


def _rope_loop(log: ReplayLog | None) -> Any:
    def loop(device: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        qk, v, o = nn.Linear(D, 2 * D).to(device), nn.Linear(D, D).to(device), nn.Linear(D, 4).to(device)
        params = [*qk.parameters(), *v.parameters(), *o.parameters()]
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
        angles = torch.outer(torch.arange(T).float(), torch.linspace(0.1, 1.0, D // 2))
        freqs = torch.polar(torch.ones(T, D // 2), angles).to(device)
        g = torch.Generator().manual_seed(3)
        out: dict[str, torch.Tensor] = {}
        for step in range(10):
            x = torch.randn(2, T, D, generator=g).to(device)
            y = torch.randint(0, 4, (2 * T,), generator=g).to(device)
            q, k = _rope(qk(x), torch.cat([freqs, freqs], -1)).split(D, -1)
            a = F.scaled_dot_product_attention(q, k, v(x), is_causal=True)
            loss = F.cross_entropy(o(torch.tanh(a)).reshape(-1, 4), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out[f"loss{step}"] = loss.detach().cpu()
            if log is not None:
                log.mark(step)
                s = ae.stats()
                _SEEN.update(refused=s["refused_ops"], recorded=s["ops_recorded"])
                _SEEN.setdefault("recorded_at", {})[step] = s["ops_recorded"]
        out.update({f"p{n}": p.detach().cpu() for n, p in enumerate(params)})
        return out
    return loop


def test_complex_ops_run_between_regions_and_the_rest_of_the_step_replays() -> None:
    _SEEN.clear()
    assert_replays_eagers_bits(_rope_loop, no_divergence=True)
    refused = _SEEN["refused"]
    assert refused.get("aten.view_as_complex.default") == "complex-values", refused
    assert "aten.mm.default" not in refused and "aten.addmm.default" not in refused, refused
    recorded = _SEEN["recorded_at"]
    assert recorded[9] == recorded[6], "the last steps still recorded ops: not replayed"

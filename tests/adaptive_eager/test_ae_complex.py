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


def _made_complex_loop(log: ReplayLog | None) -> Any:
    """Complex values made by a cast (``.to(complex64)``), an integer index into a complex
    tensor (``freqs[pos]``, an op refused before for boolean masks) and a complex tensor
    made before the loop, read by ops with real results (``abs``, ``angle``)."""
    def loop(device: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        lin = nn.Linear(16, 16).to(device)
        opt = torch.optim.SGD(lin.parameters(), lr=0.05)
        table = torch.polar(torch.ones(6, 8), torch.linspace(0.1, 1.0, 48).reshape(6, 8)).to(device)
        pos = torch.tensor([3, 1, 0, 2]).to(device)
        g = torch.Generator().manual_seed(4)
        out: dict[str, torch.Tensor] = {}
        for step in range(10):
            x = torch.randn(4, 16, generator=g).to(device)
            h = lin(x)
            a = h.reshape(4, 8, 2)[..., 0]
            r = (a.to(torch.complex64) * table[pos]).real
            loss = (r * torch.abs(table[:4]) + torch.angle(table[:4]) * a).sum() + h.double().float().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out[f"loss{step}"] = loss.detach().cpu()
            if log is not None:
                log.mark(step)
                _SEEN["refused"] = ae._runtime.refused
        out.update({f"p{n}": p.detach().cpu() for n, p in enumerate(lin.parameters())})
        return out
    return loop


def test_complex_values_made_by_a_cast_or_an_index_are_refused_only_in_those_calls() -> None:
    _SEEN.clear()
    assert_replays_eagers_bits(_made_complex_loop, no_divergence=True)
    refused, aten = _SEEN["refused"], torch.ops.aten
    real, cplx = torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.complex64)
    ints, mask = torch.tensor([1, 0]), torch.tensor([True, False])
    # a real cast stays in its region; a cast to complex runs between regions
    assert refused.refuses(aten._to_copy.default, (real,), {"dtype": torch.complex64})
    assert not refused.refuses(aten._to_copy.default, (real,), {"dtype": torch.float64})
    # an integer index of a complex tensor runs between regions, of a real one stays in
    # its region, and a boolean mask still runs between regions (its own rule, kept)
    assert refused.refuses(aten.index.Tensor, (cplx, [ints]), {})
    assert not refused.refuses(aten.index.Tensor, (real, [ints]), {})
    assert refused.refuses(aten.index.Tensor, (real, [mask]), {})
    assert refused.refuses(aten.abs.default, (cplx,), {})
    assert not refused.refuses(aten.abs.default, (real,), {})

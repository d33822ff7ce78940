"""``foreach=True`` optimizers, an EMA of weights and a checkpoint round trip under
adaptive eager: their regions compile and replay, with eager's bits.

Two defects found by running such a script: ``Adam(foreach=True)`` steps with
``_foreach_lerp_``, ``_foreach_sqrt``, ``_foreach_div_`` and ``_foreach_maximum_``, which had
no lowering, so every region holding an optimizer step failed to compile; and a tensor
loaded with ``torch.load(map_location="neuron")`` keeps a storage marked as device memory,
whose ``clone`` the first replay's verification called and the device refused, so a region
reading the restored optimizer state never replayed."""

from __future__ import annotations

import io
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import ReplayLog, assert_replays_eagers_bits

STEPS, RELOAD_AT = 12, 5


def _model(device: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3)).to(device)


def _adam_loop(log: ReplayLog | None, counts: dict[str, Any]) -> Any:
    def loop(device: str) -> dict[str, torch.Tensor]:
        m, ema = _model(device), _model(device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True, weight_decay=1e-3,
                               foreach=True)
        g = torch.Generator().manual_seed(1)
        out: dict[str, torch.Tensor] = {}
        for step in range(STEPS):
            x, y = torch.randn(8, 6, generator=g).to(device), torch.randn(8, 3, generator=g).to(device)
            loss = F.mse_loss(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():  # torch.optim.swa_utils' EMA: one lerp per parameter
                torch._foreach_lerp_(list(ema.parameters()), list(m.parameters()), 0.1)
            if step == RELOAD_AT:  # resume from a checkpoint: the state is loaded tensors
                buf = io.BytesIO()
                torch.save(opt.state_dict(), buf)
                buf.seek(0)
                opt = torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True,
                                       weight_decay=1e-3, foreach=True)
                opt.load_state_dict(torch.load(buf, map_location=device))
            out[f"loss{step}"] = loss.detach().cpu()
            if log is not None:
                log.mark(step)
        if log is not None:
            s = ae.stats()
            counts.update(failures=s["compile_failures"], program_steps=list(log.program_steps),
                          raised=s["fallback_reasons"].get("reference-raised", 0))
        out.update({f"m.{k}": v.cpu() for k, v in m.state_dict().items()})
        out.update({f"ema.{k}": v.cpu() for k, v in ema.state_dict().items()})
        return out
    return loop


def test_foreach_adam_ema_and_a_reloaded_state_replay_with_eagers_bits() -> None:
    counts: dict[str, Any] = {}
    assert_replays_eagers_bits(lambda log: _adam_loop(log, counts), no_divergence=True)
    assert counts["failures"] == 0, "a region holding the foreach step failed to compile"
    assert counts["raised"] == 0, "a first replay's verification raised"
    assert any(s > RELOAD_AT + 1 for s in counts["program_steps"]), counts


def test_a_loaded_buffers_storage_clones_on_the_host() -> None:
    buf = io.BytesIO()
    torch.save(torch.arange(6.0).to("neuron"), buf)
    buf.seek(0)
    t = torch.load(buf, map_location="neuron")
    storage = t.buffer.untyped_storage()
    copy = storage.clone()
    assert copy.data_ptr() != storage.data_ptr()
    assert copy.device == storage.device
    assert torch.equal(torch.empty(0).set_(copy.cpu()).view(torch.float32), torch.arange(6.0))


"""Ops whose output shape depends on the data end the segment; ``topk`` replays inside one.

An evaluation loop that computes metrics (``unique``, ``bincount``, ``masked_select``,
``nonzero``, a boolean-mask index) over batches of three sizes replayed nothing: those
ops' shapes change with the data, so the segment holding them never repeated, no region
around them got hot, and the variants recorded at its start ran out
(``refused.DYNAMIC_SHAPE_ALWAYS``: they run between regions from the start). A
gather with an integer index (``h[idx]``) stays in its region. ``topk``'s tie order is
eager's algorithm's; it was refused and ran between regions, and is now eager's own
kernel in the program (``decomp/eager_kernels``), so a top-k loop replays whole.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import ReplayLog, assert_replays_eagers_bits


def _metrics_loop(log: ReplayLog | None) -> Any:
    def loop(device: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Linear(32, 5)).to(device).eval()
        g = torch.Generator().manual_seed(4)
        out: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for step in range(12):
                n = 17 + step % 3  # batches of three sizes, in turn
                x = torch.randn(n, 10, generator=g).to(device)
                y = torch.randint(0, 5, (n,), generator=g).to(device)
                idx = torch.randperm(n, generator=g)[:6].to(device)
                logits = m(x)
                p = logits.softmax(-1)
                pred = logits.argmax(-1)
                conf = torch.zeros(5, 5, dtype=torch.long, device=device)
                conf.index_put_((y, pred), torch.ones_like(y), accumulate=True)
                best = p.max(-1).values
                results = {
                    "counts": torch.bincount(pred, minlength=5),
                    "unique": torch.unique(pred),
                    "confident": torch.masked_select(best, best > 0.3),
                    "right": torch.nonzero(pred == y).flatten(),
                    "masked": p[best > 0.25].sum(0),
                    "gathered": p[idx] * 2,  # an integer index: recorded, in a region
                    "conf": conf,
                }
                for k, v in results.items():
                    out[f"{k}{step}"] = v.cpu()
                if log is not None:
                    log.mark(step)
        return out
    return loop


def test_ops_with_data_dependent_shapes_end_the_segment_and_the_rest_replays() -> None:
    assert_replays_eagers_bits(_metrics_loop, no_divergence=True)


_REFUSED: dict[str, str] = {}


def _topk_loop(log: ReplayLog | None) -> Any:
    def loop(device: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        head = nn.Linear(16, 40).to(device)
        g = torch.Generator().manual_seed(2)
        out: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for step in range(8):
                h = torch.randn(3, 16, generator=g).to(device)
                logits = (head(h) * 0.5).round()  # ties among the top values
                vals, ids = logits.topk(5, dim=-1)
                probs = torch.softmax(vals, -1)
                out[f"ids{step}"] = (ids * 2).cpu()
                out[f"probs{step}"] = probs.cpu()
                if log is not None:
                    log.mark(step)
                    _REFUSED.update(ae.stats()["refused_ops"])
        return out
    return loop


def test_topk_replays_inside_its_region_with_eagers_tie_order() -> None:
    _REFUSED.clear()
    assert_replays_eagers_bits(_topk_loop, no_divergence=True)
    assert _REFUSED == {}, _REFUSED  # (before: topk ran between regions, tie-order)


def _masked_loss_loop(log: ReplayLog | None) -> Any:
    """A loss over the positions a padding mask keeps (``logits[mask]``): its backward
    puts one gradient row per kept position (``index_put`` with the mask), which a
    static-shape program cannot hold."""
    def loop(device: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
        g = torch.Generator().manual_seed(5)
        out: dict[str, torch.Tensor] = {}
        for step in range(10):
            x = torch.randn(4, 7, 6, generator=g).to(device)
            y = torch.randint(0, 3, (4, 7), generator=g).to(device)
            mask = (torch.arange(7)[None] < torch.randint(3, 8, (4, 1), generator=g)).to(device)
            logits = m(x)
            loss = nn.functional.cross_entropy(logits[mask], y[mask])
            m.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in m.parameters():
                    p -= 0.1 * p.grad
            out[f"loss{step}"] = loss.detach().cpu()
            if log is not None:
                log.mark(step)
                _FAILURES.append(ae.stats()["compile_failures"])
        for i, p in enumerate(m.parameters()):
            out[f"p{i}"] = p.detach().cpu()
        return out
    return loop


_FAILURES: list[int] = []


def test_a_masked_loss_trains_with_its_backwards_index_put_between_regions() -> None:
    _FAILURES.clear()
    assert_replays_eagers_bits(_masked_loss_loop, no_divergence=True)
    assert _FAILURES[-1] == 0  # (before: each region holding the index_put failed)

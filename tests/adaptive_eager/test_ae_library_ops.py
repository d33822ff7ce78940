"""Ops of a ``torch.library`` namespace the compiler does not know run between regions.

FSDP2 on more than one rank calls its own ``fsdp::`` ops between its collectives:
``all_gather_copy_in`` (writes its output buffer, no alias annotation), and
``split_with_sizes_copy`` / ``chunk_cat`` (write an ``out`` list or tensor). Recorded into
adaptive eager's regions, they made every region holding them fail to compile, for good
("trace-failed", "bad-request": the compile worker never imported FSDP), so FSDP2 under
adaptive eager ran the root module's forward and loss eagerly on 2 ranks and was slower
than on 1. The compiler now refuses them by name (``custom-op``) before tracing, adaptive
eager learns them once, runs them eagerly between regions, and the regions around them
replay. The buffers FSDP2 allocates with ``empty`` for them are region outputs whose
values are unspecified, so a checked replay does not compare them (``compiler.verify``).
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp._fully_shard import _fsdp_collectives  # noqa: F401  (fsdp:: ops)

import torchneuron.adaptive_eager as ae
import torchneuron.compiler as tc
from torchneuron.hardware.settings import override

STEPS = 8
FSDP_OPS = ("fsdp.all_gather_copy_in.default", "fsdp.split_with_sizes_copy.default",
            "fsdp.chunk_cat.default")


def _loop(device: str) -> list[float]:
    """FSDP2's pattern on one rank's data: copy-in to an empty buffer, (the all-gather
    filling the other half), copy-out to the parameters, compute, reduce-scatter copy-in."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 4, generator=g).to(device)
    b = torch.randn(4, generator=g).to(device)
    x = torch.randn(8, 6, generator=g).to(device)
    losses = []
    for _ in range(STEPS):
        w2, b2 = w * 0.5 + 0.1, b - 0.25  # the shards (after an optimizer step)
        buf = torch.empty(56, device=device)
        inp, out = torch.ops.fsdp.all_gather_copy_in([w2.reshape(-1), b2], buf, [24, 4], 28, 0)
        out[28:].copy_(inp * 2)  # what the other rank's shards would bring
        parts = [torch.empty(24, device=device), torch.empty(4, device=device),
                 torch.empty(28, device=device)]
        torch.ops.fsdp.split_with_sizes_copy(out, [24, 4, 28], dim=0, out=parts)
        y = torch.relu(x @ parts[0].view(6, 4) + parts[1]).square()
        rs = torch.empty(2, 16, device=device)
        torch.ops.fsdp.chunk_cat([y[:4], y[4:]], 0, 2, out=rs)
        loss = (rs * 0.5).sum() + parts[2].mean()
        losses.append(loss.item())
        w, b = w2 - 0.01 * parts[0].view(6, 4), b2 + 0.01 * parts[1]
    return losses


def test_fsdp_library_ops_run_between_regions_and_the_regions_around_them_replay() -> None:
    want = _loop("cpu")
    try:
        with override(compile_latency=False):
            ae.enable()
            try:
                got = _loop("neuron")
            finally:
                ae.disable()
        s = ae.stats()
        text = ae.explain()
        for op in FSDP_OPS:
            assert s["refused_ops"].get(op) == "custom-op", (op, s["refused_ops"])
        assert s["replays"] >= STEPS // 2, text
        assert got == want
    finally:
        # the compiler's failure log keeps one message per stage and reason: later tests
        # that read their own "custom-op" message from explain() must not find ours
        tc.reset_stats()

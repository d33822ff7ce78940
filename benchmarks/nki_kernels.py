"""Simulated device time of attention and an MoE layer: eager, torch.compile, NKI kernels.

Usage: ``python benchmarks/nki_kernels.py [--seq 2048 4096] [--hardware trn2] [--linear-only]``

Then one linear layer: BF16 ``F.linear`` against FP8 ``torch._scaled_mm`` on trn2 and trn3
and the MXFP8 NKI kernel on trn3.

Device time is the busy time the op adds to the simulated core's queue (integer ns,
identical on every run); host costs (dispatch, launch) are excluded, so the three columns
compare kernels, not launch overheads. The NKI column adds the kernel's roofline share;
"NKI compiled" is the same NKI op under ``torch.compile(backend="neuron")``, carried into
the executable as a custom call (its kernels' schedule, plus the program around it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import torchneuron
from torchneuron.hardware import get_core, settings
from torchneuron.nki import lib
from torchneuron.nki.lib.attention import flash_attention_fwd_kernel


def device_ns(fn: Callable[[], Any], warmup: int = 1) -> int:
    """Device busy time of one call of ``fn`` after ``warmup`` calls (compiles happen there)."""
    core = get_core(0)
    for _ in range(warmup):
        fn()
        core.synchronize()
    before = core.timeline.device_busy_ns
    fn()
    core.synchronize()
    return core.timeline.device_busy_ns - before


def attention_row(seq: int, heads: int, dim: int, causal: bool) -> dict[str, Any]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq, dim, dtype=torch.bfloat16).to("neuron")
               for _ in range(3))

    def eager() -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    compiled = torch.compile(eager, backend="neuron")
    row = {"case": f"attention bf16 S={seq} H={heads} D={dim} causal={causal}",
           "eager_ns": device_ns(eager), "compiled_ns": device_ns(compiled),
           "nki_ns": device_ns(lambda: lib.flash_attention(q, k, v, causal=causal)),
           "nki_compiled_ns": device_ns(torch.compile(
               lambda: lib.flash_attention(q, k, v, causal=causal), backend="neuron"))}
    flash_attention_fwd_kernel(*(t.cpu().reshape(heads, seq, dim) for t in (q, k, v)),
                               causal=causal)
    row["nki_roofline_share"] = round(flash_attention_fwd_kernel.last_schedule.roofline_share, 3)
    return row


def moe_row(tokens: int, hidden: int, ffn: int, experts: int, top_k: int) -> dict[str, Any]:
    torch.manual_seed(0)
    x = torch.randn(tokens, hidden)
    w_router = torch.randn(hidden, experts)
    w_gate, w_up = torch.randn(experts, hidden, ffn) / 11, torch.randn(experts, hidden, ffn) / 11
    w_down = torch.randn(experts, ffn, hidden) / 16
    args = [t.to(torch.bfloat16).to("neuron") for t in (x, w_router, w_gate, w_up, w_down)]

    def plain() -> Any:
        xx, wr, wg, wu, wd = args
        probs = (xx @ wr).float().softmax(-1)
        vals, idx = probs.topk(top_k)
        vals = (vals / vals.sum(-1, keepdim=True)).to(xx.dtype)
        out = torch.zeros_like(xx)
        for e in range(experts):  # every expert on every token, gated (no data-dependent shapes)
            gate = (vals * (idx == e)).sum(-1, keepdim=True)
            out = out + gate * ((F.silu(xx @ wg[e]) * (xx @ wu[e])) @ wd[e])
        return out

    compiled = torch.compile(plain, backend="neuron")
    return {"case": f"moe bf16 T={tokens} H={hidden} F={ffn} E={experts} k={top_k}",
            "eager_ns": device_ns(plain), "compiled_ns": device_ns(compiled),
            "nki_ns": device_ns(lambda: lib.moe(*args, top_k)),
            "nki_compiled_ns": device_ns(torch.compile(lambda: lib.moe(*args, top_k),
                                                       backend="neuron")),
            "nki_roofline_share": None}


def linear_row(hw: str, tokens: int, d_in: int, d_out: int) -> dict[str, Any]:
    """One linear layer's forward on ``hw``: BF16 ``F.linear``, FP8 ``torch._scaled_mm``
    and (trn3) the MXFP8 kernel."""
    settings.set_hardware(hw)
    torchneuron.hardware.reset()
    torch.manual_seed(0)
    x = torch.randn(tokens, d_in, dtype=torch.bfloat16).to("neuron")
    w = torch.randn(d_out, d_in, dtype=torch.bfloat16).to("neuron")
    x8 = torch.randn(tokens, d_in).to(torch.float8_e4m3fn).to("neuron")
    w8 = torch.randn(d_out, d_in).to(torch.float8_e4m3fn).to("neuron")
    one = torch.tensor(1.0).to("neuron")
    return {"case": f"linear {hw} T={tokens} {d_in}->{d_out}",
            "bf16_ns": device_ns(lambda: F.linear(x, w)),
            "fp8_ns": device_ns(lambda: torch._scaled_mm(x8, w8.t(), one, one,
                                                         out_dtype=torch.bfloat16)),
            "mxfp8_ns": device_ns(lambda: lib.mxfp8_linear(x, w)) if hw == "trn3" else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", type=int, nargs="*", default=[2048, 4096])
    ap.add_argument("--hardware", default="trn2")
    ap.add_argument("--linear-only", action="store_true")
    args = ap.parse_args(argv)
    settings.set_hardware(args.hardware)
    torchneuron.hardware.reset()
    rows = [] if args.linear_only else [attention_row(s, 1, 64, True) for s in args.seq]
    if not args.linear_only:
        rows.append(moe_row(512, 256, 512, 8, 2))
    print(f"{'case':<48} {'eager us':>10} {'compiled us':>12} {'NKI us':>10} "
          f"{'NKI compiled us':>16} {'NKI roofline':>13}")
    for r in rows:
        share = "" if r["nki_roofline_share"] is None else f"{100 * r['nki_roofline_share']:.1f}%"
        print(f"{r['case']:<48} {r['eager_ns'] / 1e3:>10.1f} {r['compiled_ns'] / 1e3:>12.1f} "
              f"{r['nki_ns'] / 1e3:>10.1f} {r['nki_compiled_ns'] / 1e3:>16.1f} {share:>13}")
    print(f"\n{'case':<48} {'BF16 us':>10} {'FP8 us':>10} {'MXFP8 NKI us':>13}")
    for r in (linear_row(hw, 1024, 2048, 2048) for hw in ("trn2", "trn3")):
        mx = "" if r["mxfp8_ns"] is None else f"{r['mxfp8_ns'] / 1e3:.1f}"
        print(f"{r['case']:<48} {r['bf16_ns'] / 1e3:>10.1f} {r['fp8_ns'] / 1e3:>10.1f} {mx:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

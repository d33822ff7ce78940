"""A mixture-of-experts block in the NKI dialect: router top-k, then experts on token blocks.

Two kernels, as NKI-lib splits the work:

- ``moe_router_kernel``: logits ``x @ w_router`` on TensorE (tokens on partitions), softmax
  along the experts (free axis), then top-k by k rounds of (row max, first index of the
  max by a GpSimd iota and a VectorE min, mask it out); the k gates are renormalized.
- ``moe_experts_kernel``: tokens grouped per expert in blocks of 128 (tables computed from
  the router's output by ``group_tokens``, its device work charged as a sort on GpSimd
  between two DMAs), each block gathered by an indirect
  DMA (an index tile), run through its expert's SwiGLU MLP
  ``(silu(x Wg) * (x Wu)) Wd`` with the contraction in 128-row chunks accumulated in
  PSUM, scaled by its gates and added into the output rows (gather, add, scatter).

Padding rows of a block point at a scratch row ``T`` of the padded input and output, so
no real row is written twice by one block. Limits: hidden size H and expert size F
multiples of 128 and at most 512 (one PSUM bank wide); at most 512 experts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron.hardware import current_profile
from torchneuron.nki._context import Instruction
from torchneuron.nki.kernel import deliver, jit
from torchneuron.nki.schedule import KernelSchedule, schedule

__all__ = ["group_tokens", "grouping_schedule", "moe_experts_kernel", "moe_router_kernel"]

_P = 128


def _transposed_chunks(t: Any, dtype: Any) -> list[Any]:
    """[128, H] -> H/128 tiles [128, 128] of t.T (TensorE transposes)."""
    return [nl.copy(nisa.nc_transpose(t[:, c * _P:(c + 1) * _P]), dtype=dtype)
            for c in range(t.shape[1] // _P)]


@jit
def moe_router_kernel(x: Any, w_router: Any, top_k: int) -> Any:
    """x [T, H], w_router [H, E] -> (gates [T, k] fp32, experts [T, k] int32)."""
    t_dim, h = x.shape
    e = w_router.shape[1]
    gates = nl.ndarray((t_dim, top_k), dtype=nl.float32, buffer=nl.shared_hbm)
    experts = nl.ndarray((t_dim, top_k), dtype=nl.int32, buffer=nl.shared_hbm)
    w = [nl.load(w_router[c * _P:(c + 1) * _P, :]) for c in range(h // _P)]
    col = nisa.iota(np.arange(_P)[:, None] * 0 + np.arange(e)[None, :], dtype=nl.float32)
    for i in nl.affine_range(t_dim // _P):
        rows = slice(i * _P, (i + 1) * _P)
        xt = _transposed_chunks(nl.load(x[rows, :]), x.dtype)
        logits = nl.zeros((_P, e), dtype=nl.float32, buffer=nl.psum)
        for c in range(len(w)):
            logits += nisa.nc_matmul(xt[c], w[c])
        p = nl.softmax(nl.copy(logits), axis=1, dtype=nl.float32)
        vals = nl.ndarray((_P, top_k), dtype=nl.float32)
        idxs = nl.ndarray((_P, top_k), dtype=nl.float32)
        for j in range(top_k):
            mx = nl.max(p, axis=1, keepdims=True)
            at_max = nisa.tensor_scalar(p, nl.equal, mx)
            first = nl.min(nl.where(at_max, col, float(e)), axis=1, keepdims=True)
            vals[:, j:j + 1] = nl.copy(mx)
            idxs[:, j:j + 1] = nl.copy(first)
            p = nl.where(nisa.tensor_scalar(col, nl.equal, first), -1.0, p)
        norm = nl.reciprocal(nl.sum(vals, axis=1, keepdims=True))
        nl.store(gates[rows, :], value=nisa.tensor_scalar(vals, nl.multiply, norm))
        nl.store(experts[rows, :], value=nl.copy(idxs, dtype=nl.int32))
    return gates, experts


def group_tokens(experts: torch.Tensor, gates: torch.Tensor, n_experts: int
                 ) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """The grouping: (expert of each block, token index per row [NB, 128] int32 with
    padding rows = T, gate per row [NB, 128] fp32 with padding rows = 0). The tables are
    computed here on CPU values; the device is charged the work (``grouping_schedule``),
    as for a kernel, wherever the op runs (eager, or inside an executable)."""
    block_expert, idx, row_gates = _group(experts, gates, n_experts)
    deliver(grouping_schedule(experts.numel(), len(block_expert)),
            (tuple(experts.shape), len(block_expert)))
    return block_expert, idx, row_gates


def grouping_schedule(pairs: int, blocks: int) -> KernelSchedule:
    """What grouping ``pairs`` (token, expert) pairs into ``blocks`` blocks of 128 costs
    on the device, by the instruction rules every kernel is costed by: a DMA reads the
    router's expert ids and gates (8 bytes a pair), GpSimd sorts the pairs by expert
    (``n log2 n`` element steps across its 128 lanes, the rule neuronc costs ``sort``
    by) and a DMA writes the two tables (8 bytes a row). Assumed: the real NKI-lib does
    this on the device too, but publishes no figure for it."""
    steps = pairs * max(1, math.ceil(math.log2(max(pairs, 2))))
    ins = [Instruction("moe.read_routing", "dma", (1,), (2,), {"bytes": 8 * pairs, "hbm": 1}, ""),
           Instruction("moe.sort_by_expert", "gpsimd", (2,), (3,),
                       {"elems": -(-steps // _P)}, ""),
           Instruction("moe.write_tables", "dma", (3,), (4,),
                       {"bytes": 8 * _P * max(blocks, 1), "hbm": 1}, "")]
    return schedule("moe_group_tokens", ins, current_profile())


def _group(experts: torch.Tensor, gates: torch.Tensor, n_experts: int
           ) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    t_dim, k = experts.shape
    flat_e = experts.reshape(-1).long()
    flat_t = torch.arange(t_dim).repeat_interleave(k)
    flat_g = gates.reshape(-1).float()
    block_expert: list[int] = []
    idx_blocks, gate_blocks = [], []
    for ex in range(n_experts):
        sel = (flat_e == ex).nonzero().reshape(-1)
        for b in range(0, sel.numel(), _P):
            part = sel[b:b + _P]
            idx = torch.full((_P,), t_dim, dtype=torch.int32)
            g = torch.zeros(_P, dtype=torch.float32)
            idx[:part.numel()] = flat_t[part].to(torch.int32)
            g[:part.numel()] = flat_g[part]
            block_expert.append(ex)
            idx_blocks.append(idx)
            gate_blocks.append(g)
    if not idx_blocks:
        return [], torch.zeros(0, _P, dtype=torch.int32), torch.zeros(0, _P)
    return block_expert, torch.stack(idx_blocks), torch.stack(gate_blocks)


@jit
def moe_experts_kernel(x_pad: Any, w_gate: Any, w_up: Any, w_down: Any, token_idx: Any,
                       row_gates: Any, block_expert: list[int]) -> Any:
    """x_pad [T+1, H] (last row zeros), w_* [E, H, F] / [E, F, H], token_idx / row_gates
    [NB, 128] -> out [T+1, H] (row T is scratch)."""
    t1, h = x_pad.shape
    f = w_gate.shape[2]
    out = nl.ndarray((t1, h), dtype=x_pad.dtype, buffer=nl.shared_hbm)
    zero = nl.zeros((_P, h), dtype=x_pad.dtype)
    for r in range(0, t1, _P):
        nl.store(out[r:min(r + _P, t1), :], value=zero[0:min(_P, t1 - r), :])
    weights: dict[int, Any] = {}
    for b, ex in enumerate(block_expert):
        if ex not in weights:  # an expert's weights stay in SBUF for its blocks
            weights[ex] = (
                [nl.load(w_gate[ex, c * _P:(c + 1) * _P, :]) for c in range(h // _P)],
                [nl.load(w_up[ex, c * _P:(c + 1) * _P, :]) for c in range(h // _P)],
                [nl.load(w_down[ex, c * _P:(c + 1) * _P, :]) for c in range(f // _P)])
        wg, wu, wd = weights[ex]
        idx = nl.load(token_idx[b].reshape((_P, 1)))
        g = nl.load(row_gates[b].reshape((_P, 1)))
        xb = nl.load(x_pad[idx, :])  # indirect DMA: gather 128 token rows
        xt = _transposed_chunks(xb, x_pad.dtype)
        gate_ps = nl.zeros((_P, f), dtype=nl.float32, buffer=nl.psum)
        up_ps = nl.zeros((_P, f), dtype=nl.float32, buffer=nl.psum)
        for c in range(h // _P):
            gate_ps += nisa.nc_matmul(xt[c], wg[c])
            up_ps += nisa.nc_matmul(xt[c], wu[c])
        hid = nl.multiply(nl.silu(nl.copy(gate_ps)), up_ps, dtype=x_pad.dtype)
        ht = _transposed_chunks(hid, x_pad.dtype)
        y_ps = nl.zeros((_P, h), dtype=nl.float32, buffer=nl.psum)
        for c in range(f // _P):
            y_ps += nisa.nc_matmul(ht[c], wd[c])
        y = nisa.tensor_scalar(y_ps, nl.multiply, g)
        acc = nl.load(out[idx, :])  # gather, add, scatter back
        nl.store(out[idx, :], value=nl.add(acc, y, dtype=x_pad.dtype))
    return out

"""What a group of ops reads, writes and keeps on chip: shared by ``fuse`` and ``allocate``.

Model (one rule for both passes, so fusion never builds a kernel allocation rejects):
a kernel streams its values through SBUF in blocks of 128 partition rows. Boundary
inputs and outputs are double-buffered (two blocks each: one in flight on DMA while
engines work on the other). Intermediates live one block at a time from their
definition to their last use inside the kernel. A matmul's stationary operand (rhs)
is needed whole by every row block, so it is counted in full, separately, and may be
split into panels by ``allocate`` when it does not fit. Matmul accumulators live in
PSUM (one 2 KiB/partition bank per 512 output columns, double-buffered).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from torchneuron.compiler.stablehlo import Operation, TensorType
from torchneuron.hardware import HardwareProfile

from ._ops import (
    all_operands,
    dtype_bytes,
    is_constant,
    is_splat_constant,
    kind,
    nbytes,
    row_blocks,
)


@dataclass
class Footprint:
    """Boundary and on-chip sizes of one candidate kernel."""

    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    intermediates: list[str] = field(default_factory=list)
    read_bytes: int = 0  # HBM bytes of boundary inputs (splat constants are memsets: 0)
    write_bytes: int = 0  # HBM bytes of boundary outputs
    streamed_sbuf: int = 0  # double-buffered I/O blocks + peak live intermediate blocks
    stationary_sbuf: int = 0  # matmul rhs operands held whole
    stationary_inputs: list[str] = field(default_factory=list)
    psum_bytes: int = 0
    intermediate_bytes: dict[str, int] = field(default_factory=dict)  # full size, for spills
    intermediate_blocks: dict[str, int] = field(default_factory=dict)  # on-chip block size

    @property
    def sbuf_bytes(self) -> int:
        """Working set if nothing is split or spilled."""
        return self.streamed_sbuf + self.stationary_sbuf


def _block(t: TensorType, cap_elems: int | None) -> int:
    """Bytes of one streamed block of ``t``: 128 whole rows, or one fixed tile if allowed."""
    rows = -(-nbytes(t) // row_blocks(t))
    if cap_elems is None:
        return rows
    return min(rows, cap_elems * dtype_bytes(t.dtype))


def splat_values(body: Sequence[Operation]) -> set[str]:
    """Names of splat constants: memsets on chip, never read from HBM."""
    return {r for op in body if is_constant(op) and is_splat_constant(op) for r in op.results}


def needs_whole_rows(body: Sequence[Operation], op_indices: Sequence[int]) -> bool:
    """Does an op run after a reduction in this kernel (softmax, layernorm...)?

    Then a block must hold whole rows: the reduced value is needed before the rest of
    the row can be finished. Otherwise blocks are fixed 128 x ``tile_free_elems`` tiles
    whatever the row length (elementwise chains, matmul epilogues, lone reductions
    accumulate chunk by chunk).
    """
    seen_reduce = False
    for i in op_indices:
        is_reduce = kind(body[i]) == "reduce"
        if seen_reduce and not is_reduce:
            return True
        seen_reduce = seen_reduce or is_reduce
    return False


def footprint(
    body: Sequence[Operation],
    op_indices: Sequence[int],
    users: dict[str, list[int]],
    types: dict[str, TensorType],
    profile: HardwareProfile,
    splats: set[str] | None = None,
) -> Footprint:
    """Sizes of the kernel made of ``op_indices`` (ascending) of ``body``.

    ``splats`` (values of splat constants) may be passed in by callers that size many
    kernels of one body, to avoid rescanning it.
    """
    members = set(op_indices)
    produced = {r: i for i in op_indices for r in body[i].results}
    if splats is None:
        splats = splat_values(body)
    seen: set[str] = set()
    fp = Footprint()
    cap = (
        None
        if needs_whole_rows(body, op_indices)
        else profile.sbuf_partitions * profile.tile_free_elems
    )
    stationary: set[str] = set()
    for i in op_indices:
        op = body[i]
        if kind(op) == "contraction" and len(op.operands) > 1:
            stationary.add(op.operands[1])
            fp.psum_bytes = max(fp.psum_bytes, _psum(op, profile))
    for i in op_indices:
        for v in all_operands(body[i]):
            if v in produced or v in seen or v not in types:
                continue
            seen.add(v)
            fp.inputs.append(v)
            if v in splats:
                continue
            fp.read_bytes += nbytes(types[v])
            if v in stationary:
                fp.stationary_sbuf += nbytes(types[v])
                fp.stationary_inputs.append(v)
            else:
                fp.streamed_sbuf += 2 * _block(types[v], cap)
    last_use: dict[str, int] = {}
    for v in produced:
        outside = [u for u in users.get(v, []) if u not in members]
        inside = [u for u in users.get(v, []) if u in members]
        if outside or not inside:
            fp.outputs.append(v)
            fp.write_bytes += nbytes(types[v])
            fp.streamed_sbuf += 2 * _block(types[v], cap)
        else:
            fp.intermediates.append(v)
            fp.intermediate_bytes[v] = nbytes(types[v])
            fp.intermediate_blocks[v] = _block(types[v], cap)
            last_use[v] = max(inside)
    fp.streamed_sbuf += _peak_live(body, op_indices, last_use, fp.intermediate_blocks)
    return fp


def _peak_live(
    body: Sequence[Operation],
    op_indices: Sequence[int],
    last_use: dict[str, int],
    blocks: dict[str, int],
) -> int:
    """Largest sum of live intermediate blocks at any op (matmul outputs sit in PSUM)."""
    dies_at: dict[int, list[str]] = {}
    for v, last in last_use.items():
        dies_at.setdefault(last, []).append(v)
    live: dict[str, int] = {}
    current = peak = 0
    for i in op_indices:
        op = body[i]
        if kind(op) != "contraction":
            for r in op.results:
                if r in last_use and r not in live:
                    live[r] = blocks[r]
                    current += blocks[r]
        peak = max(peak, current)
        for v in dies_at.get(i, []):
            current -= live.pop(v, 0)
    return peak


def _psum(op: Operation, profile: HardwareProfile) -> int:
    """PSUM bytes of a matmul: a bank per 512 output columns, double-buffered, capped."""
    n = op.result_types[0].shape[-1] if op.result_types[0].shape else 1
    banks = min(profile.psum_banks, 2 * -(-n // profile.psum_bank_fp32_cols))
    return banks * profile.psum_bank_bytes * profile.sbuf_partitions


def fit(fp: Footprint, capacity: int) -> tuple[int, int, int, int]:
    """(sbuf_bytes, extra_read, extra_write, spill_bytes) after panelling and spilling."""
    streamed, stationary = fp.streamed_sbuf, fp.stationary_sbuf
    extra_read = extra_write = 0
    if stationary and streamed + stationary > capacity:
        room = max(capacity - streamed, capacity // 8)
        panels = -(-stationary // room)
        moving = fp.read_bytes - stationary
        extra_read += (panels - 1) * max(moving, 0)
        stationary = min(stationary, room)
    for v in sorted(fp.intermediates, key=lambda v: (-fp.intermediate_bytes[v], v)):
        if streamed + stationary <= capacity:
            break
        streamed -= fp.intermediate_blocks[v]
        extra_read += fp.intermediate_bytes[v]
        extra_write += fp.intermediate_bytes[v]
    return streamed + stationary, extra_read, extra_write, extra_read + extra_write

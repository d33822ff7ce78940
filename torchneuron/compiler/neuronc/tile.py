"""Tiling: how each op maps onto 128 partitions, 128x128 PE tiles and 512-wide PSUM banks.

Why: the tile counts are what the hardware actually issues (one matmul instruction per
(m, k, n) tile, one vector instruction per partition block and free-dim chunk); reports
show them, and they explain a kernel's instruction overheads. The cost itself comes
from ``kernel_cost`` with the same tiling rules, so eager and compiled agree.
"""

from __future__ import annotations

import dataclasses
import math

from torchneuron.hardware import HardwareProfile

from ._ops import kind, matmul_shape, numel
from .program import Program


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def matmul_tiles(op_shape: tuple[int, int, int, int], p: HardwareProfile) -> dict[str, int]:
    """Tiles of one matmul: M and K in 128s on the PE array, N in 512-column PSUM banks."""
    b, m, k, n = op_shape
    mt, kt, nt = _ceil(m, p.pe_cols), _ceil(k, p.pe_rows), _ceil(n, p.psum_bank_fp32_cols)
    return {
        "batch": b,
        "m": m,
        "k": k,
        "n": n,
        "m_tiles": mt,
        "k_tiles": kt,
        "n_tiles": nt,
        "matmul_instructions": b * mt * kt * nt,
        "output_tiles": b * mt * nt,
        "psum_banks": min(p.psum_banks, nt),
    }


def stream_tiles(shape: tuple[int, ...], p: HardwareProfile) -> dict[str, int]:
    """Tiles of a streamed op: rows (all dims but the last) over 128 partitions."""
    rows = math.prod(shape[:-1]) if len(shape) >= 2 else 1
    free = numel_of(shape) // max(rows, 1)
    blocks = _ceil(rows, p.sbuf_partitions)
    return {
        "partition_tiles": max(blocks, 1),
        "free_elems": free,
        "instructions": max(blocks, 1) * max(1, _ceil(free, p.tile_free_elems)),
    }


def numel_of(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def run(program: Program, profile: HardwareProfile) -> Program:
    """Fill ``Kernel.tiles`` (one dict per op, parallel to ``op_indices``)."""
    body = program.function.body
    kernels = []
    for k in program.kernels:
        tiles: list[dict[str, int]] = []
        for i, engine in zip(
            k.op_indices, k.engines or ["vector"] * len(k.op_indices), strict=True
        ):
            op = body[i]
            if kind(op) == "contraction":
                tiles.append(matmul_tiles(matmul_shape(op), profile))
            elif engine == "none" or not op.result_types:
                tiles.append({})
            else:
                # a reduction streams its input, everything else its (largest) result
                types = list(op.result_types) + (
                    op.operand_types[:1] if kind(op) == "reduce" else []
                )
                big = max(types, key=numel)
                tiles.append(stream_tiles(big.shape, profile))
        kernels.append(dataclasses.replace(k, tiles=tiles))
    return dataclasses.replace(program, kernels=kernels)

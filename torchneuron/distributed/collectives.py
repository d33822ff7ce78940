"""``python -m torchneuron.distributed.collectives``: an nccom-test style table of simulated
collective times.

Why from the cost model, not by launching ranks: the table is what the neuron process group
charges for each collective (``hardware.collectives.collective_cost``, the function the group
calls), which depends only on the profile, the op, the size and the ranks; launching eight
processes to move gigabytes through gloo would measure this machine, not Trainium. The columns
are nccom-test's: size, count, time, algorithm bandwidth, bus bandwidth (algorithm bandwidth
times the collective's factor, e.g. 2(p-1)/p for all_reduce).

    python -m torchneuron.distributed.collectives --nproc 8 --op all_reduce --sizes 1KB:1GB
"""

from __future__ import annotations

import argparse
import re
import sys

from torchneuron.hardware import current_profile
from torchneuron.hardware.collectives import (
    BUS_FACTORS,
    CollectiveCost,
    collective_cost,
    get_topology,
)

__all__ = ["parse_size", "sizes_between", "table", "main"]

_UNITS = {"": 1, "B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}


def parse_size(text: str) -> int:
    """``"64MB"`` -> 67108864 (powers of 1024, as nccom-test's ``-b`` / ``-e``)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?B?)\s*", text.upper())
    if m is None:
        raise ValueError(f"cannot read the size {text!r}: expected e.g. 1KB, 64MB, 1GB")
    return int(m.group(1)) * _UNITS[m.group(2)]


def sizes_between(spec: str, factor: int = 2) -> list[int]:
    """``"1KB:1GB"`` -> 1 KB, 2 KB, ... 1 GB (each ``factor`` times the previous)."""
    lo_text, _, hi_text = spec.partition(":")
    lo = parse_size(lo_text)
    hi = parse_size(hi_text) if hi_text else lo
    if lo <= 0 or hi < lo:
        raise ValueError(f"bad size range {spec!r}: expected LOW:HIGH with 0 < LOW <= HIGH")
    out = [lo]
    while out[-1] * factor <= hi:
        out.append(out[-1] * factor)
    return out


def _fmt_size(n: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def table(op: str, nproc: int, sizes: list[int], profile_name: str | None = None,
          dtype_bytes: int = 4) -> tuple[str, list[CollectiveCost]]:
    """The table's text and its rows, for ``nproc`` ranks placed from global rank 0."""
    name = profile_name or current_profile().name
    topo = get_topology(name)
    ranks = list(range(nproc))
    rows = [collective_cost(op, s, ranks, topo) for s in sizes]
    head = (f"# {op} on {nproc} ranks, simulated {name} "
            f"(busbw factor {BUS_FACTORS[op](nproc):.4f})")
    lines = [head, f"{'size':>8} {'count':>12} {'algorithm':>9} {'level':>8} "
                   f"{'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"]
    for c in rows:
        lines.append(f"{_fmt_size(c.nbytes):>8} {c.nbytes // dtype_bytes:>12} {c.algorithm:>9} "
                     f"{c.level:>8} {c.ns / 1e3:>12.2f} {c.algbw / 1e9:>12.2f} "
                     f"{c.busbw / 1e9:>12.2f}")
    return "\n".join(lines), rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchneuron.distributed.collectives",
        description="Simulated collective times on Trainium, nccom-test style.")
    parser.add_argument("--nproc", type=int, default=8, help="ranks (one per NeuronCore)")
    parser.add_argument("--op", default="all_reduce", choices=sorted(BUS_FACTORS))
    parser.add_argument("--sizes", default="1KB:1GB", help="LOW:HIGH, doubling")
    parser.add_argument("--hardware", default=None, help="profile (default: the current one)")
    parser.add_argument("--assumptions", action="store_true",
                        help="also print the topology's figures, the assumed ones marked")
    args = parser.parse_args(argv)
    if args.nproc < 1:
        parser.error("--nproc must be at least 1")
    text, _ = table(args.op, args.nproc, sizes_between(args.sizes), args.hardware)
    print(text)
    if args.assumptions:
        print(get_topology(args.hardware or current_profile().name).describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Printable listing of a compiled program: kernels, their schedule, and what fusion saved.

Why: users (and tests) should be able to see where the time goes and why, e.g.

    #0 fused_dot_general_add_logistic  [0, 1, 2, 3]  tensor+vector+scalar  ...
"""

from __future__ import annotations

from .program import Program


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _time(ns: int) -> str:
    if abs(ns) >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    if abs(ns) >= 1_000:
        return f"{ns / 1e3:.2f} us"
    return f"{ns} ns"


def format_program(program: Program) -> str:
    """Kernels (name, ops, engines, tiles, SBUF, HBM, time, bound), totals, eager comparison."""
    body = program.function.body
    lines = [f"neuronc program for {program.profile}: passes {', '.join(program.passes_run)}"]
    if program.stats:
        lines.append("  " + ", ".join(f"{k}={v}" for k, v in sorted(program.stats.items())))
    for n, k in enumerate(program.kernels):
        engines = "+".join(dict.fromkeys(e for e in k.engines if e != "none")) or "none"
        ops = ", ".join(f"%{body[i].results[0] if body[i].results else i}" for i in k.op_indices)
        mm = sum(t.get("matmul_instructions", 0) for t in k.tiles)
        blocks = max((t.get("partition_tiles", 0) for t in k.tiles), default=0)
        hbm = (k.work.hbm_read_bytes + k.work.hbm_write_bytes) if k.work else 0
        lines.append(
            f"  #{n} {k.name}  ops[{ops}]  {engines}  tiles(mm={mm}, blocks={blocks})  "
            f"sbuf={_size(k.sbuf_bytes)} psum={_size(k.psum_bytes)} hbm={_size(hbm)}"
            + (f" spill={_size(k.spill_bytes)}" if k.spill_bytes else "")
            + f"  [{_time(k.start_ns)} .. {_time(k.end_ns)}] {k.cost.get('bound', '?')}-bound"
        )
    c = program.cost
    if c is None:
        return "\n".join(lines)
    busy = ", ".join(f"{e}={_time(ns)}" for e, ns in c.engine_busy_ns.items() if ns)
    lines += [
        f"  total {_time(c.total_ns)} on device; engines busy: {busy or 'none'}",
        f"  {c.num_ops} StableHLO ops -> {c.num_kernels} kernels; HBM read "
        f"{_size(c.hbm_read_bytes)}, written {_size(c.hbm_write_bytes)}; "
        f"spills {_size(c.spill_bytes)}; SBUF peak {_size(c.sbuf_peak_bytes)}",
        f"  op-by-op: {c.eager_launches} launches, {_time(c.eager_ns)} (launches included), "
        f"HBM {_size(c.eager_hbm_read_bytes + c.eager_hbm_write_bytes)}",
        f"  fusion saved {c.launches_saved} launches and {_size(c.hbm_bytes_removed)} of HBM traffic",
    ]
    return "\n".join(lines)

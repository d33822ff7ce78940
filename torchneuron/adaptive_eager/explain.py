"""``explain()``'s text: what adaptive eager found, compiled and replayed, in words a user
can act on.

Kept apart from the runtime so that the wording can change without touching the state
machine: everything here only reads the runtime's counters and regions. What it takes
care to say:

- regions refused because a replay would not pay (a few ops) are one summary line, not
  an "aborted" entry each (a GPT-2 run had seven 1-op regions filling the output);
- a replay that began as another region sharing its first ops and went on as this one
  is explained, not only counted;
- a compile failure says what it means for the user (the region runs eagerly, with
  eager's results) and how to report it, not where in the compiler a fix would go;
- a region whose compile finished after the loop it served had ended says so, instead
  of "still compiling", once the run is over (adaptive eager disabled), and one whose
  real compile already failed says that, not that a longer run would replay it;
- executables loaded from the compile cache are counted in the headline.
"""

from __future__ import annotations

import re
from typing import Any

from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.refused import stream_names
from torchneuron.adaptive_eager.region import Region, State

__all__ = ["explain_runtime", "explain_region"]

# CompileError's message ends with "[stage, op=..., reason=...]" (compiler/errors.py)
_WHERE = re.compile(r"\[(?P<stage>\w+)(?:, op=(?P<op>[^,\]]+))?, reason=(?P<reason>[^\]]+)\]\s*$")


def _s(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def explain_runtime(runtime: Any, stats: dict[str, Any], *, enabled: bool, now_ns: int,
                    min_gain_ns: int) -> str:
    """The whole text: headline, fallback counts, refused ops, one entry per region seen
    at least twice (or past recording), then the summaries."""
    s = stats
    lines = [f"adaptive eager: {s['ops_recorded']} ops recorded, {s['regions_detected']} regions, "
             f"{s['compilations']} compilations, {s['cache_hits']} cache hits (executables "
             f"loaded from the compile cache), {s['replays']} replays "
             f"({s['first_tier_replays']} in the first tier: the recorded eager kernels issued "
             f"as one batch while the program compiled), {s['side_exits']} side "
             f"exits, {s['variant_switches']} variant switches"]
    for reason, n in s["fallback_reasons"].items():
        lines.append(f"  fallback {reason} x{n}: {Reason(reason).message}")
    for op, why in s["refused_ops"].items():
        lines.append(f"  {op} runs eagerly between regions: the compiler refused it ({why})")
    regions = list(runtime.regions.values())
    no_gain = [r for r in regions if r.state is State.ABORTED and r.reason is Reason.NO_GAIN]
    refused = set(s["refused_ops"])
    for r in regions:
        if r in no_gain:
            continue
        if r.times_seen >= 2 or r.state is not State.RECORDING:
            lines.append(explain_region(r, enabled=enabled, now_ns=now_ns, refused=refused))
    if no_gain:
        sizes = sorted(len(r) for r in no_gain)
        span = f"{sizes[0]}" if sizes[0] == sizes[-1] else f"{sizes[0]}-{sizes[-1]}"
        lines.append(
            f"{_plural(len(no_gain), 'region')} of {span} op{'' if sizes[-1] == 1 else 's'} "
            "not compiled: predicted gain below cost (a replay of so few ops would save less "
            f"host time than TORCHNEURON_AE_MIN_GAIN_NS, {min_gain_ns} ns); they run eagerly")
    hidden = sum(1 for r in regions if r.times_seen < 2 and r.state is State.RECORDING)
    if hidden:
        lines.append(f"({hidden} regions seen once are not shown)")
    return "\n".join(lines)


def explain_region(region: Region, *, enabled: bool, now_ns: int,
                   refused: set[str] | None = None) -> str:
    """One region: length, sightings, state, executable, replays, exits and, when it is
    not swapped in, why."""
    r, exe = region, region.executable
    state, why = _status(r, enabled=enabled, now_ns=now_ns, refused=refused or set())
    exits = ", ".join(f"{k.value} x{n}" for k, n in sorted(r.exits.items(), key=lambda x: x[0].value))
    cached = exe is not None and r.ready_at_ns is None and r.compile_latency_ns == 0
    replays = f"; replays {r.replays}"
    if r.first_tier_replays:
        replays += f" ({r.first_tier_replays} in the first tier)"
    if r.switched_in:
        replays += (f" ({r.switched_in} of them began as another region with the same first "
                    "ops and went on as this one once the next op told them apart)")
    lines = [
        f"region {r.key}: {len(r)} ops, seen {r.times_seen}x, state {state}"
        + (" (periodic)" if r.periodic else "")
        + (f"; a block repeated {r.copies}x back to back" if r.copies > 1 else ""),
        "  executable: "
        + (f"{exe.name} ({exe.num_kernels} kernels, {exe.device_ns} ns)" if exe else "none")
        + (" from the compile cache" if cached else "")
        + replays
        + f"; modeled compile {r.compile_latency_ns} ns"
        + (f"; lifted scalars {len(r.plan.lifted)}" if getattr(r.plan, "lifted", None) else "")
        + (f", ready at {r.ready_at_ns} ns" if r.ready_at_ns is not None else ""),
        f"  side exits: {exits or 'none'}",
    ]
    if why:
        lines.append(f"  {why}")
    return "\n".join(lines)


def _status(r: Region, *, enabled: bool, now_ns: int, refused: set[str]) -> tuple[str, str]:
    """(the state as shown, the line saying why it is not swapped in, or "")."""
    if r.state is State.COMPILING and r.ready_at_ns is None and r.compile_job is not None:
        return r.state.value, ("why its program is not swapped in yet: its compile waits for "
                               "a worker of the simulated compiler (regions that save more "
                               "per second of compile go first)")
    tier1 = (f"replayed {r.first_tier_replays}x in the first tier meanwhile; "
             if r.first_tier_replays else "")
    failure = r.known_compile_error()
    if failure is not None:
        return "compile failed", (
            f"{tier1}why its program is never swapped in: its real compile already failed "
            f"(its modeled compile {'finishes' if enabled else 'would have finished'} at "
            f"{_s(r.ready_at_ns or 0)}, when it is refused): "
            + _compile_failed(f"{type(failure).__name__}: {failure}", refused))
    if r.state is State.COMPILING and r.ready_at_ns is not None:
        if r.ready_at_ns <= now_ns:  # done on the simulated clock; its start has not come
            return "ready", ("not replayed: ready at " + _s(r.ready_at_ns) + " simulated, and "
                             "its first op has not come again since"
                             + ("" if enabled else ": the loop it served ended first"))
        if not enabled:  # the run is over: it will never be swapped in
            return "compiled, program never replayed", (
                f"{tier1}its compiled program never replayed: the loop it served ended (the "
                f"run's last op at {_s(now_ns)} simulated) before its modeled compile finished "
                f"at {_s(r.ready_at_ns)}; a longer run replays it, and with the compile cache "
                "on the next run starts with it ready")
        return r.state.value, (f"{tier1}why its program is not swapped in yet: "
                               f"{Reason.COMPILE_PENDING.value}: "
                               f"{Reason.COMPILE_PENDING.message} (ready at {r.ready_at_ns} ns)")
    if r.reason is Reason.COMPILE_FAILED:
        return r.state.value, "why not swapped in: " + _compile_failed(r.detail, refused)
    if r.reason is not None and (r.state is not State.READY or r.reason is Reason.BACKED_OFF):
        return r.state.value, f"why not swapped in: {r.reason.value}: {r.detail or r.reason.message}"
    return r.state.value, ""


def _compile_failed(detail: str, refused: set[str]) -> str:
    """A compile failure in words: what it blames, what happens now, how to report it."""
    m = _WHERE.search(detail or "")
    op = m.group("op") if m else None
    blame = (f"the compiler cannot handle {op} ({m.group('reason')}, {m.group('stage')} stage)"
             if m and op else
             f"the compiler refused the region ({m.group('reason')}, {m.group('stage')} stage)"
             if m else "the compiler refused the region")
    between = op is not None and not {_base(n) for n in stream_names("aten." + _base(op))}.isdisjoint(
        {_base(name) for name in refused})
    message = _WHERE.sub("", detail or "").strip()
    return (f"{Reason.COMPILE_FAILED.value}: {blame}. The region runs eagerly, with eager's "
            "results" + ("; that op runs eagerly between regions from now on, so the ops "
                         "around it still compile" if between else "")
            + ". To report it, include this message and torchneuron.compiler.explain()'s "
            f"output. Compiler message: {message[:400]}")


def _base(op: str) -> str:
    """``aten._foreach_mul_.Scalar`` -> ``_foreach_mul``: in-place and functional alike."""
    parts = op.replace("::", ".").split(".")
    return parts[1].rstrip("_") if len(parts) > 1 else op

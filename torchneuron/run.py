"""``python -m torchneuron.run script.py [args]``: run a script under adaptive eager.

Enables adaptive eager before the script starts (nothing in the script changes) and
prints ``adaptive_eager.explain()``, the simulated device time and, when nothing
replayed, why, when it ends. The script runs as ``python script.py`` would run it: as
``__main__``, with its own ``sys.argv`` and its folder first on ``sys.path`` (so it
imports its sibling modules), and its exit status is the command's. ``-m module``
runs a module as ``python -m module`` would.
"""

from __future__ import annotations

import os
import runpy
import sys

__all__ = ["main"]

_USAGE = ("usage: python -m torchneuron.run script.py [args...]\n"
          "       python -m torchneuron.run -m module [args...]\n"
          "Runs the script (or module) with torchneuron.adaptive_eager enabled and prints "
          "a summary\n(explain(), the simulated time, why nothing replayed) on stderr.")


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"


def summary(now_ns: int) -> str:
    """explain(), the simulated time, and a hint when no region replayed."""
    from torchneuron import adaptive_eager as ae
    from torchneuron.adaptive_eager.region import State

    lines = [ae.explain(), f"simulated host time on neuron:0: {now_ns} ns ({_seconds(now_ns)})"]
    s = ae.stats()
    tier1 = s["first_tier_replays"]
    if s["replays"] == tier1 and s["ops_recorded"]:
        compiling = [r for r in ae.regions()
                     if r.state is State.COMPILING and r.ready_at_ns is not None]
        errors = [r.known_compile_error() for r in compiling]
        failed = sum(1 for e in errors if e is not None)
        pending = [r.ready_at_ns for r, e in zip(compiling, errors, strict=True) if e is None]
        if failed and not pending:
            lines.append(("no compiled program replayed" if tier1 else "nothing replayed")
                         + f": the compile of its {failed} hot region(s) failed (see "
                         "explain() above); those regions run eagerly, with eager's results.")
        elif pending:
            lines.append(
                ("no compiled program replayed" if tier1 else "nothing replayed")
                + f": the script ended (at {_seconds(now_ns)} simulated) before "
                f"the modeled compile of its {len(pending)} hot region(s) finished (the first "
                f"at {_seconds(min(pending))})"
                + (f"; meanwhile they replayed {tier1}x in the first tier (recorded eager "
                   "kernels)" if tier1 else "")
                + "; run more steps, or run again with the compile "
                "cache on (TORCHNEURON_CACHE not 0) to start from the compiled regions"
                + (f" ({failed} other hot region(s) failed to compile: see explain() above)."
                   if failed else "."))
        elif not s["compilations"]:
            lines.append("nothing replayed: no region repeated often enough to compile (a "
                         "loop replays from about its 3rd step, from about its 9th without a "
                         "sync such as loss.item(); see explain() above).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE)
        return 0 if argv else 2
    module = None
    if argv[0] == "-m":
        if len(argv) < 2:
            print(f"torchneuron.run: -m needs a module name\n{_USAGE}", file=sys.stderr)
            return 2
        module, argv = argv[1], argv[1:]
    elif not os.path.exists(argv[0]):
        print(f"torchneuron.run: can't open file {argv[0]!r}: no such file", file=sys.stderr)
        return 2
    import torchneuron
    from torchneuron.hardware import get_core

    torchneuron.adaptive_eager.enable()
    sys.argv = argv
    # ``python script.py`` puts the script's folder first on sys.path (``python -m`` put
    # the current directory there, kept behind it in case torchneuron came from it):
    # a script importing its sibling modules needs it.
    if module is None:
        sys.path.insert(0, os.path.dirname(os.path.realpath(argv[0])))
    try:
        if module is None:
            runpy.run_path(argv[0], run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        torchneuron.adaptive_eager.disable()
        print(summary(get_core(0).now), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

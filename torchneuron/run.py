"""``python -m torchneuron.run script.py [args]``: run a script under adaptive eager.

Enables adaptive eager before the script starts (nothing in the script changes) and
prints ``adaptive_eager.explain()`` and the simulated device time when it ends.
The script runs as ``python script.py`` would run it: as ``__main__``, with its own
``sys.argv`` and its folder first on ``sys.path`` (so it imports its sibling modules),
and its exit status is the command's.
"""

from __future__ import annotations

import os
import runpy
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m torchneuron.run script.py [args...]\n"
              "Runs script.py with torchneuron.adaptive_eager enabled and prints a summary.")
        return 0 if argv else 2
    import torchneuron
    from torchneuron.hardware import get_core

    torchneuron.adaptive_eager.enable()
    sys.argv = argv
    # ``python script.py`` puts the script's folder first on sys.path (``python -m`` put
    # the current directory there, kept behind it in case torchneuron came from it):
    # a script importing its sibling modules needs it.
    sys.path.insert(0, os.path.dirname(os.path.realpath(argv[0])))
    try:
        runpy.run_path(argv[0], run_name="__main__")
    finally:
        torchneuron.adaptive_eager.disable()
        print(torchneuron.adaptive_eager.explain(), file=sys.stderr)
        core = get_core(0)
        print(f"simulated host time on neuron:0: {core.now} ns", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

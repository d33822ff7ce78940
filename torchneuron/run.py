"""``python -m torchneuron.run script.py [args]``: run a script under adaptive eager.

Enables adaptive eager before the script starts (nothing in the script changes) and
prints ``adaptive_eager.explain()`` and the simulated device time when it ends.
"""

from __future__ import annotations

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

"""Size report: lines per module and per folder of the package; fails above the budget.

    python tools/sz.py            # folders, then the largest modules; exit 1 over budget
    python tools/sz.py --all      # every module
    python tools/sz.py --max 600 --root torchneuron

Why: a module a reader can hold in their head stays under 600 lines (STYLE.md; tinygrad's
``sz.py`` keeps the same watch in its CI). Lines are physical lines (``wc -l``), comments
and docstrings included: they are read too. ``make lint`` runs this, so a module that
grows past the budget fails the lint until it is split.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_lines(root: Path) -> dict[str, int]:
    """``{"compiler/stats.py": 120, ...}``: lines of every ``.py`` file under ``root``."""
    sizes = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        with path.open("rb") as f:
            sizes[path.relative_to(root).as_posix()] = sum(1 for _ in f)
    return sizes


def folder_totals(sizes: dict[str, int]) -> dict[str, tuple[int, int]]:
    """``{folder: (modules, lines)}``, each module counted in its own folder only."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, n in sizes.items():
        folder = name.rpartition("/")[0] or "."
        totals[folder][0] += 1
        totals[folder][1] += n
    return {k: (v[0], v[1]) for k, v in sorted(totals.items())}


def report(sizes: dict[str, int], budget: int, show_all: bool, top: int) -> str:
    lines = [f"{'folder':<40} {'modules':>7} {'lines':>7}"]
    for folder, (count, n) in folder_totals(sizes).items():
        lines.append(f"{folder:<40} {count:>7} {n:>7}")
    lines.append(f"{'total':<40} {len(sizes):>7} {sum(sizes.values()):>7}")
    ranked = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ranked if show_all else ranked[:top]
    lines.append("")
    lines.append(f"{'module':<56} {'lines':>6}")
    for name, n in shown:
        mark = f"  over {budget}" if n > budget else ""
        lines.append(f"{name:<56} {n:>6}{mark}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(ROOT / "torchneuron"), help="package folder")
    parser.add_argument("--max", type=int, default=600, help="lines allowed per module")
    parser.add_argument("--all", action="store_true", help="list every module")
    parser.add_argument("--top", type=int, default=15, help="largest modules listed")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not root.is_dir():
        parser.error(f"--root {root} is not a folder; expected the package, e.g. torchneuron")
    sizes = module_lines(root)
    print(report(sizes, args.max, args.all, args.top))
    over = sorted(name for name, n in sizes.items() if n > args.max)
    if over:
        print(f"\n{len(over)} module(s) over {args.max} lines: {', '.join(over)}. Split each "
              f"into modules of one concept (STYLE.md).", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``TORCHNEURON_DUMP_DIR``: write every compilation's artifacts for inspection.

For each compilation, a folder with the prepared FX graph, the StableHLO, the
compiled program (kernels and engine schedule) and its cost estimate, and the
executable itself. Off unless the environment variable is set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchneuron.hardware import settings

__all__ = ["dump_dir", "dump_compilation"]


def dump_dir() -> Path | None:
    d = settings.get_value("dump_dir")  # TORCHNEURON_DUMP_DIR (compiler/options.py)
    return Path(d) if d else None


def dump_compilation(name: str, graph_text: str, exe: Any) -> Path | None:
    root = dump_dir()
    if root is None:
        return None
    folder = root / f"{name}-{exe.digest[:12]}"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    (folder / "fx_graph.txt").write_text(graph_text)
    (folder / "stablehlo.mlir").write_text(exe.stablehlo)
    (folder / "program.txt").write_text(exe.report())
    (folder / "cost.json").write_text(json.dumps(exe.program.get("cost", {}), indent=2))
    exe.save(folder / "executable.json")
    return folder

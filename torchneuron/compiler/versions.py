"""The two versions an executable carries: its format's and the compiler's.

Apart from ``executable`` because the cache keys (``keys``) hash them too, and
``executable`` checks an entry against its key: with the versions here, neither module
imports the other's dependents back.

The compiler's version is the package version plus a digest of the package's Python
source. Why the digest: what a cached executable computes is decided by the code that
lowered it (prepare's rewrites, the decompositions, the eager kernels carried inside a
program, neuronc's schedule), and that code changes between releases without a version
bump whenever someone works on it in an editable install, the way backend builders use
this project. Keyed on the version alone, a changed lowering found its predecessor's
executables on disk and replayed the old numbers; keyed on the source, any change to the
code makes the old entries unreachable (``prune --incompatible`` removes them), and an
installed release, whose files do not change, keeps its entries across processes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from torchneuron._version import __version__

__all__ = ["FORMAT_VERSION", "COMPILER_VERSION", "source_digest"]

FORMAT_VERSION = 2


def source_digest(root: Path | None = None) -> str:
    """sha256 (first 12 hex digits) over the paths and contents of the ``.py`` files under
    ``root`` (default: the ``torchneuron`` package), in sorted order; "nosource" when there
    are none (a build that ships only bytecode falls back to the version alone)."""
    root = root or Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    for path in files:
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:12] if files else "nosource"


# The compiler is versioned with the package (typed once in _version.py) and its source.
COMPILER_VERSION = f"{__version__}+src.{source_digest()}"

"""The cache seam: the small interface through which ``compile_graph`` uses a store.

The compiler never imports ``torchneuron.cache``: whoever calls ``compile_graph``
(torch.compile's backend, adaptive eager) hands in an object with these four
methods, or ``None`` for no caching. Two maps live behind it:

- executable key -> executable bytes (``load``/``save``). The key is a hash of what
  determines the executable (``keys.executable_key``): StableHLO text, compiler and
  format versions, hardware target, compiler options.
- graph key -> executable key (``resolve``/``link``), an index from what the caller
  knows *before* lowering (a prepared FX graph, an adaptive-eager region signature),
  so a warm process skips prepare, the Torch-MLIR worker and neuronc entirely.

A store must never raise for I/O trouble (a full disk, a read-only directory): it
degrades to "not cached". ``load`` returns only bytes it verified (a checksum), but
the compiler still checks the content against the key (``executable.check_entry``)
and treats bytes that fail as a counted miss and rebuilds. A store may also have
``discard(key)``: the compiler calls it for such bytes, so they are not served again.

A store may also remember failed compiles under the index key (``failure(ikey)``, a
record of ``stage``, ``reason``, ``op``, ``message`` or None; ``remember_failure(ikey,
record)``; ``forget_failure(ikey)``): the compiler then raises the remembered error at
once instead of preparing and lowering the graph again. Only failures the graph itself
causes are remembered: a stage's refusal naming the op to blame (not a worker that
crashed or timed out).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["ExecutableStore"]


@runtime_checkable
class ExecutableStore(Protocol):
    """Where compiled executables are kept between compilations (and processes)."""

    def load(self, key: str) -> bytes | None:
        """The executable bytes saved under ``key``, or None (absent or unusable)."""
        ...

    def save(self, key: str, data: bytes, meta: dict[str, Any]) -> None:
        """Keep ``data`` under ``key``; ``meta`` is JSON-safe and describes the entry."""
        ...

    def resolve(self, graph_key: str) -> str | None:
        """The executable key linked to ``graph_key``, or None."""
        ...

    def link(self, graph_key: str, key: str) -> None:
        """Remember that ``graph_key`` compiles to the executable saved under ``key``."""
        ...

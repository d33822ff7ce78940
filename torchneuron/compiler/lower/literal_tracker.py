"""A literal tracker for Torch-MLIR's FX importer that never hands out a dead tensor's constant.

Why: the importer remembers, per tensor it turns into an MLIR constant, the attribute it
made, keyed by ``id(tensor)`` (``torch_mlir.extras.fx_importer.RefTracker``; its
finalizer is disabled upstream for a leak). A bool constant is imported through a
temporary ``.to(torch.uint8)`` copy that dies right after; the next bool constant's copy
can get the same ``id``, and the importer then gives it the first one's values. A
transformer's attention backward holds three such masks (``select_backward`` of q, k and
v as ``select_scatter``): when two collided, the key gradient landed in the value slot,
a wrong number that depended on where Python placed two objects.

:class:`LiveRefTracker` checks that a remembered entry still refers to the very object
asked about (its weak reference is alive and the same object), and otherwise starts a
new entry. Imported only by ``lower.py`` (inside the compile worker), since it needs
torch_mlir.
"""

from __future__ import annotations

from typing import Any

from torch_mlir.extras.fx_importer import RefMapping, RefTracker

__all__ = ["LiveRefTracker"]


class LiveRefTracker(RefTracker):
    """``RefTracker`` whose entries are only reused for the object they were made for."""

    def track(self, referrent: Any) -> RefMapping:
        existing = self._refs.get(id(referrent))
        if existing is not None and _refers_to(existing, referrent):
            return existing
        info = RefMapping(referrent)
        self._refs[id(referrent)] = info
        return info


def _refers_to(mapping: RefMapping, referrent: Any) -> bool:
    ref = getattr(mapping, "_referrent", None)
    return ref is not None and ref() is referrent

"""The ledger: what the runtime's parts share, and nothing they do.

Adaptive eager's runtime is four parts, each in its own module, in the order an op meets
them: the dispatch mode and the op path (``mode``), segment and region detection
(``detect``), the region lifecycle and compile submission (``lifecycle``), and the
swap-in and replay decisions (``swapin``). They share one ledger: the regions found (by
key and by first op), the counters and fallback reasons that ``stats()`` and
``explain()`` read, the segment being recorded, the replay in progress, and the ops
refused or growing that run between regions. Keeping it apart lets each part be read
without the others, and none of them import each other in a circle.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from torchneuron.adaptive_eager.growing import Growing
from torchneuron.adaptive_eager.recorder import Segment
from torchneuron.adaptive_eager.refused import RefusedOps
from torchneuron.adaptive_eager.region import Region
from torchneuron.adaptive_eager.signature import OpSig

__all__ = ["Ledger", "start_key"]


class Ledger:
    """All state of adaptive eager in this process that more than one part reads."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.segment = Segment()
        self.regions: dict[str, Region] = {}
        self.by_start: dict[tuple, list[Region]] = {}
        self.replay: Any = None  # the ``Replay`` in progress, if any
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.growing = Growing(self.reasons)  # ops whose shapes change every step: eager
        self.refused = RefusedOps()  # ops the compiler refuses in any region: eager
        self.index = 0  # the device of the last op
        self.wall_stall_s = 0.0

    def pos(self) -> int:
        """Ops seen so far, recorded or replayed (side-exited ops aside)."""
        return self.counts["ops_recorded"] + self.counts["ops_deferred"]


def start_key(sig: OpSig) -> tuple:
    """What a region's first op is looked up by at a start point: the overload, its
    arguments' description (its ``Call``) and its dataflow (not its outputs, known only
    after it ran)."""
    return (sig.func, sig.static.call, sig.refs)

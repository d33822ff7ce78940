"""Every reason adaptive eager falls back to eager, each an ordinary, named event.

Like LuaJIT's ``lj_traceerr.h``: one enum, one message per reason. Side exits, refused
regions and skipped replays are all counted by reason (``stats()["fallback_reasons"]``)
and explained per region (``explain()``).
"""

from __future__ import annotations

import enum

__all__ = ["Reason"]


class Reason(enum.Enum):
    """Why a region ran eagerly. ``value`` is the stable name, ``message`` says why."""

    GUARD_MISMATCH = "guard-mismatch"
    EARLY_READ = "early-read"
    SYNC_INSIDE = "sync-inside-region"
    BOUNDARY_INSIDE = "boundary-inside-region"
    LIVE_VALUE_NOT_OUTPUT = "live-value-not-output"
    DEFERRED_MEMORY = "deferred-memory"
    ALIASED_INPUTS = "aliased-inputs"
    SHORT_ROWS_WRITTEN = "short-rows-written"
    INDEX_OUT_OF_RANGE = "index-out-of-range"
    REFERENCE_RAISED = "reference-raised"
    COMPILE_FAILED = "compile-failed"
    CAPTURE_FAILED = "capture-failed"
    NO_GAIN = "no-gain"
    TOO_MANY_VARIANTS = "too-many-variants"
    BACKED_OFF = "backed-off"
    BLACKLISTED = "blacklisted"
    COMPILE_PENDING = "compile-pending"
    VERIFY_MISMATCH = "verify-mismatch"
    HOST_COPY_INTO_INPUT = "host-copy-into-region-input"
    GROWING_CAPPED = "growing-patterns-capped"

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES = {
    Reason.GUARD_MISMATCH: "the next op differed from the region's recorded op (overload, "
    "tensor metadata, dataflow, scalar arguments, grad mode or autocast state)",
    Reason.EARLY_READ: "a value of the region was read before the region ended",
    Reason.SYNC_INSIDE: "the host synchronized (synchronize, an event) before the region ended",
    Reason.BOUNDARY_INSIDE: "an op that cannot be deferred (a read of values, host data, an "
    "explicit generator, a metadata-changing write) came before the region ended",
    Reason.LIVE_VALUE_NOT_OUTPUT: "a value still held at the region's end is not an output "
    "of the compiled region (it was not held when the region was captured)",
    Reason.DEFERRED_MEMORY: "deferred values exceeded TORCHNEURON_AE_MAX_DEFERRED_BYTES",
    Reason.ALIASED_INPUTS: "two inputs of the region share storage; compiled regions take "
    "distinct inputs",
    Reason.SHORT_ROWS_WRITTEN: "the region writes in place into an input whose rows are "
    "shorter than ATen's vector loop (a column chunk of a wider tensor): eager's in-place "
    "ops run those rows in their scalar loop, other last bits than the executable's "
    "contiguous values",
    Reason.INDEX_OUT_OF_RANGE: "an index is out of range (an input, seen by the guard, or "
    "one the region computed, seen by the executable's check): the deferred ops run "
    "eagerly and eager raises the error",
    Reason.REFERENCE_RAISED: "the first replay's eager reference (verification) raised: "
    "the deferred ops run eagerly and raise it where eager does",
    Reason.COMPILE_FAILED: "the compiler refused the region (see torchneuron.compiler.explain())",
    Reason.CAPTURE_FAILED: "the region could not be captured as a graph",
    Reason.NO_GAIN: "the predicted host saving per replay is below "
    "TORCHNEURON_AE_MIN_GAIN_NS; not compiled",
    Reason.TOO_MANY_VARIANTS: "the start point already has TORCHNEURON_AE_MAX_VARIANTS "
    "compiled variants, or 4x as many recorded ones (a shape that changes every step, such "
    "as a growing KV cache); new variants there run eagerly",
    Reason.BACKED_OFF: "the region exited too often; replay skipped for a while (back-off)",
    Reason.BLACKLISTED: "the region exited too often after back-offs; never replayed again",
    Reason.COMPILE_PENDING: "its modeled compile had not finished on the simulated clock",
    Reason.VERIFY_MISMATCH: "a checked replay (its first, under TORCHNEURON_VERIFY or "
    "TORCHNEURON_AE_VERIFY_FIRST_REPLAY; any, under TORCHNEURON_AE_VERIFY_REPLAYS) differed "
    "from eager (eager's results were used); never replayed again",
    Reason.HOST_COPY_INTO_INPUT: "host data was copied into a tensor the region had already "
    "used before the region ended",
    Reason.GROWING_CAPPED: "a growing op's pattern was not kept: growing.py already keeps "
    "its maximum of distinct patterns, so that op is recorded (and its step does not replay)",
}

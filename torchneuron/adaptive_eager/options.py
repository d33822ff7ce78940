"""Adaptive eager's policies, declared as rows of the one settings table.

Why here: the knobs belong to the JIT that reads them, while the table, its parsing and
its warnings are shared from ``hardware/settings.py``. Imported first by
``torchneuron/adaptive_eager/__init__.py``, so every row exists before the runtime reads
it (``settings.get_value("ae_hot_threshold")``); no lower layer reads these rows.

======================================  =========  =========================================
environment variable                    default    meaning
======================================  =========  =========================================
TORCHNEURON_ADAPTIVE_EAGER              0          "1" enables adaptive eager at import
TORCHNEURON_AE_HOT_THRESHOLD            2          sightings before a region is compiled
TORCHNEURON_AE_MAX_REGION_OPS           4096       longest region (ops)
TORCHNEURON_AE_MAX_VARIANTS             4          compiled variants per start point
TORCHNEURON_AE_EXITS_BEFORE_BLACKLIST   3          side exits that back a region off
TORCHNEURON_AE_BACKOFF_STARTS           8          starts skipped after a back-off
TORCHNEURON_AE_MAX_DEFERRED_BYTES       1 GiB      deferred bytes before a replay ends early
TORCHNEURON_AE_MIN_GAIN_NS              50000      least predicted saving worth a compile
TORCHNEURON_AE_FIRST_TIER               1          replay recorded kernels while compiling
TORCHNEURON_AE_VERIFY_FIRST_REPLAY      1          check each region's first replay
TORCHNEURON_AE_VERIFY_REPLAYS           0          check every replay
TORCHNEURON_AE_RECORD_TRAIL             1          record a repeated segment by reference
======================================  =========  =========================================
"""

from __future__ import annotations

from torchneuron.hardware.settings import Setting, declare, parse_bool

__all__ = ["ROWS"]

ROWS: tuple[Setting, ...] = (
    Setting("adaptive_eager", "TORCHNEURON_ADAPTIVE_EAGER", False, parse_bool,
            "enable adaptive eager at import (as torchneuron.adaptive_eager.enable())"),
    Setting("ae_hot_threshold", "TORCHNEURON_AE_HOT_THRESHOLD", 2, int,
            "times a region must be seen before it is compiled"),
    Setting("ae_max_region_ops", "TORCHNEURON_AE_MAX_REGION_OPS", 4096, int,
            "longest region (ops); a sync-free stream is cut into periods at most this long"),
    Setting("ae_max_variants", "TORCHNEURON_AE_MAX_VARIANTS", 4, int,
            "compiled variants kept per start point (shapes or scalars differ)"),
    Setting("ae_exits_before_blacklist", "TORCHNEURON_AE_EXITS_BEFORE_BLACKLIST", 3, int,
            "side exits of a region, less one per good replay, that back it off (then blacklist)"),
    Setting("ae_backoff_starts", "TORCHNEURON_AE_BACKOFF_STARTS", 8, int,
            "region starts skipped after a back-off, doubled each time; blacklisted after 3"),
    Setting("ae_max_deferred_bytes", "TORCHNEURON_AE_MAX_DEFERRED_BYTES", 1 << 30, int,
            "bytes of values a replaying region may hold deferred before it ends early"),
    Setting("ae_min_gain_ns", "TORCHNEURON_AE_MIN_GAIN_NS", 50_000, int,
            "a region whose predicted host saving per replay is at most this is not compiled"),
    Setting("ae_first_tier", "TORCHNEURON_AE_FIRST_TIER", True, parse_bool,
            "while a hot region compiles, replay it as its recorded eager kernels in one batch"),
    Setting("ae_verify_first_replay", "TORCHNEURON_AE_VERIFY_FIRST_REPLAY", True, parse_bool,
            "each region's first replay also runs eagerly and is compared (as verify does)"),
    Setting("ae_verify_replays", "TORCHNEURON_AE_VERIFY_REPLAYS", False, parse_bool,
            "every replay runs eagerly too and is compared; a divergent region is blacklisted"),
    Setting("ae_record_trail", "TORCHNEURON_AE_RECORD_TRAIL", True, parse_bool,
            "an op of a segment that repeats one recorded before is checked against it and "
            "recorded as a reference to its op (trail.py); 0: every op described in full"),
)

declare(*ROWS)

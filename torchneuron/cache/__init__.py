"""The compile cache: executables kept between compilations and across processes.

Two tiers behind one ``ExecutableStore`` (``torchneuron/compiler/store.py``): an
in-process LRU bounded in bytes (``lru.py``) over an on-disk store shared by processes
(``disk.py``: atomic writes, checksums, LRU eviction under a size bound, per-process
counts in ``counters.py``). The compiler never imports this package: torch.compile's
backend and adaptive eager hand ``default_store()`` to ``compile_graph``. Inspect and
maintain the cache with the ``torchneuron-cache`` command (``cli.py``).

The directory is treated as possibly hostile: no symlink in it is followed
(``safe_fs.py``), a directory others can write is refused (``disk.py``), JSON is parsed
bounded (``bounded_json.py``), and the compiler checks each executable's content
against its key (``compiler/executable.py: check_entry``) before using it.

Its section of ``torchneuron.reset()`` / ``torchneuron.stats()`` is registered by
``store.py`` (the default store). Settings (declared in ``config.py``): ``TORCHNEURON_CACHE=0`` turns it off;
``TORCHNEURON_CACHE_DIR`` (default ``$XDG_CACHE_HOME/torchneuron`` or
``~/.cache/torchneuron``); ``TORCHNEURON_CACHE_MAX_SIZE`` (default 10GB);
``TORCHNEURON_CACHE_MEMORY_SIZE`` (default 256MB); ``TORCHNEURON_CACHE_RETRY_FAILED=1``
compiles again graphs whose failed compile the store remembers (``failure`` entries).
"""

from torchneuron.cache.config import cache_dir, enabled, format_size, parse_size
from torchneuron.cache.store import CacheStore, default_store, reset_default_store

__all__ = [
    "CacheStore",
    "cache_dir",
    "default_store",
    "enabled",
    "format_size",
    "parse_size",
    "reset_default_store",
    "stats",
]


def stats() -> dict:
    """Counts of the default store (this process and persisted totals); {} when off."""
    store = default_store()
    return {} if store is None else store.stats()

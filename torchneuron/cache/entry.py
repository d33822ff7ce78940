"""The on-disk entry format: one JSON header line, then the payload bytes.

    {"magic": "torchneuron-cache", "store_version": 1, "kind": "executable", "key": ...,
     "created": 1764554400.0, "size": 51234, "sha256": "...", "meta": {...}}\\n<payload>

Entries are data: the header is JSON, an executable's payload is the executable's own
JSON, a link's payload is the executable key it points to, and a failure's (a graph
whose compile failed, remembered so that later processes do not compile it again) is a
JSON object naming the stage, the reason, the op and the message. Nothing is unpickled or
imported while reading one, so a crafted file can at worst be refused. ``decode``
checks everything a torn, truncated or foreign file could get wrong (magic, store
version, kind, key, length, checksum) and raises ``EntryError`` naming what.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from torchneuron.cache import bounded_json

__all__ = ["STORE_VERSION", "KINDS", "FAILURE_FIELDS", "Entry", "EntryError", "encode", "decode",
           "read_header", "is_key", "check_payload", "failure_record"]

STORE_VERSION = 1
MAGIC = "torchneuron-cache"
KINDS = ("executable", "link", "failure")
FAILURE_FIELDS = ("stage", "reason", "op", "message")
_MAX_HEADER = 1 << 20
HEADER_READ = _MAX_HEADER + 1  # bytes read for a listing: enough for any header
MAX_ENTRY = 1 << 30  # bytes: a larger file in the cache is refused unread
_KEY = re.compile(r"[0-9a-f]{64}")


class EntryError(ValueError):
    """A file that is not a complete, intact entry of this store version."""


def is_key(text: str) -> bool:
    """Whether ``text`` is a full cache key (64 lowercase hex digits)."""
    return bool(_KEY.fullmatch(text))


@dataclass
class Entry:
    kind: str
    key: str
    payload: bytes
    meta: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    header: dict[str, Any] = field(default_factory=dict)


def encode(kind: str, key: str, payload: bytes, meta: dict[str, Any],
           created: float | None = None) -> bytes:
    """The bytes of one entry file."""
    if kind not in KINDS or not is_key(key):
        raise EntryError(f"cannot encode a {kind!r} entry under key {key!r}")
    header = {
        "magic": MAGIC, "store_version": STORE_VERSION, "kind": kind, "key": key,
        "created": time.time() if created is None else created, "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(), "meta": meta,
    }
    line = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return line + b"\n" + payload


def _header(line: bytes) -> dict[str, Any]:
    try:
        header = bounded_json.loads(line, max_bytes=_MAX_HEADER)
    except ValueError as e:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        raise EntryError(f"header is not JSON ({e})") from None
    if not isinstance(header, dict) or header.get("magic") != MAGIC:
        raise EntryError("not a torchneuron cache entry (magic missing)")
    if header.get("store_version") != STORE_VERSION:
        raise EntryError(f"store version {header.get('store_version')!r}, expected "
                         f"{STORE_VERSION}")
    if header.get("kind") not in KINDS or not is_key(str(header.get("key"))):
        raise EntryError("header names no valid kind and key")
    if not isinstance(header.get("size"), int) or not isinstance(header.get("meta"), dict):
        raise EntryError("header lacks size or meta")
    return header


def decode(raw: bytes, expect_key: str | None = None) -> Entry:
    """Parse and verify one entry file's bytes; raise ``EntryError`` if anything is off."""
    line, sep, payload = raw.partition(b"\n")
    if not sep or len(line) > _MAX_HEADER:
        raise EntryError("truncated: no complete header line")
    header = _header(line)
    if expect_key is not None and header["key"] != expect_key:
        raise EntryError(f"entry holds key {header['key'][:12]}, expected {expect_key[:12]}")
    if len(payload) != header["size"]:
        raise EntryError(f"truncated: {len(payload)} of {header['size']} payload bytes")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise EntryError("checksum mismatch")
    if header["kind"] == "link" and not is_key(payload.decode("ascii", "replace")):
        raise EntryError("link does not point at a key")
    if header["kind"] == "failure":
        failure_record(payload)
    created = header.get("created")
    return Entry(header["kind"], header["key"], payload, header["meta"],
                 float(created) if isinstance(created, (int, float)) else 0.0, header)


def failure_record(payload: bytes) -> dict[str, str | None]:
    """A failure entry's payload as its record: each of ``FAILURE_FIELDS`` a string (the
    op may be null), nothing else; ``EntryError`` for anything else."""
    try:
        obj = bounded_json.loads(payload, max_bytes=1 << 16)
    except ValueError as e:
        raise EntryError(f"failure payload is not JSON ({e})") from None
    if not isinstance(obj, dict) or set(obj) != set(FAILURE_FIELDS) or not all(
            isinstance(obj[k], str) or (k == "op" and obj[k] is None) for k in FAILURE_FIELDS):
        raise EntryError(f"failure payload is not a record of {', '.join(FAILURE_FIELDS)}")
    return obj


def check_payload(entry: Entry) -> None:
    """Deeper than ``decode`` (for ``verify`` and ``import``): an executable's payload
    parses as a JSON object. Loading it as an executable is the compiler's check."""
    if entry.kind == "executable":
        try:
            obj = bounded_json.loads(entry.payload, max_bytes=MAX_ENTRY)
        except ValueError as e:
            raise EntryError(f"executable payload is not JSON ({e})") from None
        if not isinstance(obj, dict) or obj.get("magic") != "torchneuron-executable":
            raise EntryError("executable payload is not a torchneuron executable")


def read_header(raw: bytes) -> dict[str, Any]:
    """Only the header of an entry file whose first bytes are ``raw`` (for listings)."""
    line, sep, _ = raw[: _MAX_HEADER + 1].partition(b"\n")
    if not sep:
        raise EntryError("truncated: no complete header line")
    return _header(line)

"""``torchneuron-cache info``: everything about one entry, as text and as JSON.

For an executable: every key component, the entry's sizes and times, an excerpt of its
StableHLO, its kernels, the neuron compiler's schedule summary and the cost estimate.
For a link: the executable it points to. For a failed compile: its stage, reason, op and
message. The payload is parsed as the compiler's
executable (data only, as the cache itself loads it).
"""

from __future__ import annotations

import json
from typing import Any

from torchneuron.cache import bounded_json, config
from torchneuron.cache import entry as entry_format
from torchneuron.cache._table import table
from torchneuron.cache.disk import DiskStore
from torchneuron.cache.entry import EntryError
from torchneuron.cache.inventory import EntryInfo, age_text

__all__ = ["describe"]

_EXCERPT_LINES = 12


def describe(disk: DiskStore, r: EntryInfo) -> tuple[dict[str, Any], str]:
    """(JSON object with ``key``, text for people) describing entry ``r``."""
    data = r.to_json()
    data["components"] = r.components
    lines = [f"key        {r.key}", f"kind       {r.kind}",
             f"size       {config.format_size(r.size)} ({r.size} bytes on disk)",
             f"created    {age_text(r.created)}", f"used       {age_text(r.used)}",
             f"hits       {r.hits}", f"compatible {r.compatible}"]
    try:
        got = entry_format.decode(disk.read_bytes(r.path), expect_key=r.key)
        exe = bounded_json.loads(got.payload, max_bytes=entry_format.MAX_ENTRY) \
            if got.kind == "executable" else {}
        if not isinstance(exe, dict):
            raise EntryError("executable payload is not a JSON object")
    except (OSError, ValueError) as e:
        data["problem"] = str(e)
        return data, "\n".join(lines + [f"problem    {e}"])
    if got.kind == "failure":
        record = entry_format.failure_record(got.payload)
        data["failure"] = record
        return data, "\n".join(lines + [f"{k:<10} {record[k]}" for k in entry_format.FAILURE_FIELDS]
                               + ["(a graph whose compile failed: it runs eagerly; "
                                  "TORCHNEURON_CACHE_RETRY_FAILED=1 compiles it again)"])
    if got.kind == "link":
        target = got.payload.decode("ascii")
        data["links_to"] = target
        present = disk.exists("executable", target)
        return data, "\n".join(lines + [f"links to   {target}" + ("" if present else
                                                                  " (absent)")])
    lines += [f"name       {r.meta.get('name')} (source {r.meta.get('source')})",
              "key components:"]
    lines += [f"  {k:<17} {json.dumps(v, sort_keys=True)}" for k, v in sorted(r.components.items())]
    program, hlo = exe.get("program", {}), exe.get("stablehlo", "")
    kernels = program.get("kernels", [])
    cost = program.get("cost", {})
    data.update(payload_bytes=len(got.payload), stablehlo_chars=len(hlo),
                stablehlo_excerpt="\n".join(hlo.splitlines()[:_EXCERPT_LINES]),
                kernels=[{"name": k.get("name"), "kind": k.get("kind"),
                          "ops": len(k.get("op_indices", [])),
                          "engines": sorted(set(k.get("engines", []))),
                          "start_ns": k.get("start_ns"), "end_ns": k.get("end_ns")}
                         for k in kernels],
                cost=cost, signature=exe.get("signature", {}))
    lines += [f"payload    {config.format_size(len(got.payload))}; StableHLO {len(hlo)} chars, "
              f"{len(hlo.splitlines())} lines", "StableHLO (excerpt):"]
    lines += ["  " + ln for ln in hlo.splitlines()[:_EXCERPT_LINES]]
    lines += [f"kernels ({len(kernels)}):"]
    lines += ["  " + ln for ln in table(
        ["NAME", "KIND", "OPS", "ENGINES", "START NS", "END NS"],
        [[k["name"], k["kind"], k["ops"], "+".join(k["engines"]), k["start_ns"], k["end_ns"]]
         for k in data["kernels"]]).splitlines()]
    lines += ["schedule and cost:"] + ["  " + ln for ln in _schedule(got.payload, cost)]
    return data, "\n".join(lines)


def _schedule(payload: bytes, cost: dict[str, Any]) -> list[str]:
    """The neuron compiler's own report, or the raw cost if the payload does not load."""
    try:
        from torchneuron.compiler import Executable

        return Executable.from_bytes(payload).report().splitlines()
    except Exception as e:  # noqa: BLE001 - info must describe even a foreign entry
        return [f"(no report: {e})", json.dumps(cost, sort_keys=True)]

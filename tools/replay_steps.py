"""One sample run step by step inside regions adaptive eager compiled and replays, and its
verdict: the part of ``tools/replay_sweep.py`` its ops and its modules
(``tools/replay_modules.py``) share.

Why apart: the ops and the modules make their samples and read their results in their own
ways, but a step under replay, what counts as a program replay, and how a step's results
are judged against eager must be one thing, or the two suites drift apart.

Each sample runs ``STEPS`` times in a loop under ``torchneuron.adaptive_eager`` (up to
``MAX_STEPS`` while its regions still learn their variants from side exits), one step per
iteration ending in a read of its results (a sync ends the region), with the compile
latency off and the first tier off (``override(compile_latency=False,
ae_first_tier=False)``: the program is ready at once and replays are program replays), no
minimum gain (a one-op region is compiled) and first-replay verification off (the
program's own numbers reach the comparison). Every step's results are judged against the
same sample run eagerly on the device bit for bit (``judge``: the compiler's own
``verify.compare_outputs`` with no tolerance; the sign of zeros included, NaN payloads
aside), elementwise or not: the project promises eager's bits. ``--tolerance``
(``REPLAY_SWEEP_TOLERANCE=1`` in the workers) lets a non-elementwise op's float results,
and a module's, within the dtype's ``assert_close`` tolerance pass; it is opt-in, for
looking at old code.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import Any

import torch
from opinfo_device import _first_line
from special_sweep import compare

__all__ = ["DEFAULT_SAMPLES", "MAX_STEPS", "SEED", "STEPS", "TIMEOUT_S", "TOLERANCE", "VERDICTS", "cpu",
           "judge", "sweep_settings", "under_replay", "verdict_of"]

STEPS = 4  # seen once, seen twice (compiled), then replayed at least twice
# a sample whose last step replayed programs and side-exited runs on, up to this many
# steps: a region whose stream goes on elsewhere at some op (two streams with the same
# first ops) is learned as variants from its exits there (``SwapIn.replay_exited``),
# steps after it first replayed
MAX_STEPS = 7
DEFAULT_SAMPLES = 6
TIMEOUT_S = 300
SEED = 0
# (--tolerance) non-elementwise float results within the dtype's assert_close tolerance pass
TOLERANCE = os.environ.get("REPLAY_SWEEP_TOLERANCE") == "1"
# most severe first: an op takes the first verdict any of its samples has
VERDICTS = ("MISMATCH", "ERROR", "NOT-REPLAYED", "REFUSED", "PASS")


def sweep_settings() -> dict[str, Any]:
    """The settings under which every replay is a replay of a compiled program."""
    return {"compile_latency": False, "ae_first_tier": False, "ae_min_gain_ns": -1,
            "ae_verify_first_replay": False, "verify": False}


def _refused(stats: dict[str, Any]) -> bool:
    """Did the compiler refuse a region or an op of the sample (run eagerly, counted)?"""
    return bool(stats["refused_ops"] or stats["compile_failures"]
                or stats["fallback_reasons"].get("compile-failed")
                or stats["fallback_reasons"].get("capture-failed"))


def _about(explained: str, region: Any) -> str:
    """The lines of ``explain()`` about ``region`` (all of it when there is none)."""
    if region is None:
        return explained
    lines = explained.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"region {region.key}")),
                 None)
    if start is None:
        why = region.reason.message if region.reason is not None else "no reason recorded"
        return f"state {region.state.value}, seen {region.times_seen}x: {why} {region.detail}"
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")),
               len(lines))
    return " | ".join(ln.strip() for ln in lines[start:end])


def _why_not(stats: dict[str, Any], explained: str, full: str = "") -> tuple[str, str]:
    """(REFUSED or NOT-REPLAYED, the reason) for a sample whose computation did not
    replay as a program, or replayed only in part around refused ops."""
    refused = stats["refused_ops"]
    reasons = stats["fallback_reasons"]
    if _refused(stats):
        whys = [ln.strip().removeprefix("why not swapped in: ") for ln in full.splitlines()
                if "why not swapped in: c" in ln]  # compile-failed, capture-failed
        why = "; ".join(f"{k}: {v}" for k, v in refused.items()) or "; ".join(whys) or \
            f"reasons {reasons}, {stats['compile_failures']} compile failures: {explained}"
        return "REFUSED", why[:400]
    return "NOT-REPLAYED", (f"reasons {reasons}: " if reasons else "") + explained[:400]


def _counters() -> tuple[int, int, int]:
    """(program replays, ops run eagerly: recorded, between regions or at side exits)."""
    import torchneuron.adaptive_eager as ae

    s = ae.stats()
    return (s["replays"] - s["first_tier_replays"],
            s["ops_recorded"] + s["ops_between_regions"], s["side_exits"])


def under_replay(step: Callable[[int], Any], compare_step: Callable[[int, Any], str | None],
                  ) -> tuple[str, str]:
    """Run ``step(i)`` for ``STEPS`` iterations under adaptive eager (and on, up to
    ``MAX_STEPS``, while the last step replayed programs and side-exited); verdict and
    detail.

    ``step`` returns the step's results already on the CPU (the read ends the region);
    ``compare_step`` says how they differ from eager (None: equal). The sample replayed
    when its last step ran as compiled programs only: a program replay, no op recorded
    or run between regions, no side exit (the reads between its results are syncs, and
    the few ops between two of them are regions too, so one replay alone proves little).
    """
    import torchneuron
    import torchneuron.adaptive_eager as ae

    ae.disable()
    torchneuron.reset()
    replayed_steps: list[int] = []
    mismatch: str | None = None
    last = (0, 0, 0)
    try:
        with ae.enabled():
            for i in range(MAX_STEPS):
                if i >= STEPS and not (last[0] and last[2]):
                    break
                before = _counters()
                got = step(i)
                last = tuple(b - a for a, b in zip(before, _counters(), strict=True))
                if last[0]:
                    replayed_steps.append(i)
                why = compare_step(i, got)
                if why is not None and mismatch is None:
                    kind = "replayed" if i in replayed_steps else "not replayed"
                    mismatch = f"step {i} ({kind}): {why}"
        stats, explained = ae.stats(), ae.explain()
        ran_ops = stats["ops_recorded"] + stats["ops_deferred"] + stats["ops_between_regions"]
        main = max((r for r in ae.regions() if r.times_seen > 1), key=len, default=None)
    except Exception as e:  # noqa: BLE001 - eager ran this sample: raising here is a defect
        ae.disable()
        return "ERROR", _first_line(e)
    finally:
        ae.reset()
    if mismatch is not None:
        return "MISMATCH", mismatch
    if not ran_ops:  # (broadcast_shapes): nothing ran on the device, nothing to replay
        return "no-device-ops", "the sample runs no op on the device"
    replays, eager_ops, exits = last
    if not replays or eager_ops or exits or _refused(stats):
        verdict, why = _why_not(stats, _about(explained, main), explained)
        return verdict, (f"last step: {replays} program replays, {eager_ops} ops eagerly, "
                         f"{exits} side exits; {why}")
    return "PASS", f"program replays at steps {replayed_steps}"


def cpu(tree: Any) -> Any:
    """The tensors of ``tree`` read to the CPU, with no op before the read (a ``detach``
    there would be a one-op region of the harness's own, exiting at the read)."""
    from torch.utils._pytree import tree_map

    with torch.no_grad():
        return tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)


def verdict_of(counts: collections.Counter[str]) -> str:
    """An op's (a module's) verdict: the most severe of its samples'."""
    return next((v for v in VERDICTS if counts[v]), "no-samples")


def judge(want: Any, got: Any, tolerance: bool = False) -> str | None:
    """None when ``got`` (a step's results) has ``want``'s bits (eager's), else how not:
    ``tools/special_sweep.py``'s ``compare``, whose judge is ``verify.compare_outputs``
    with no tolerance; ``tolerance`` lets float results within the dtype's pass."""
    bad = compare(want, got, tolerance)
    return None if bad is None else f"{bad[0]}: {bad[1]}"

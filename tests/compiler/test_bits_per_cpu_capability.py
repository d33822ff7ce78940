"""The tests that assert eager's bits for compiled graphs and replayed regions, once per
CPU code path this machine offers, each in its own process.

Eager's bits depend on the path ATen (``ATEN_CPU_CAPABILITY``: default, avx2, avx512)
and oneDNN (``ONEDNN_MAX_CPU_ISA``: SSE41 ... AVX10_1_512) choose on the CPU they run on,
and CI runs on whatever machine it gets (``tests/cpu_paths.py``: the paths, the files).
The suite itself runs at this machine's own path; here the bit-for-bit files
(``BIT_FILES``) run again at ATen's ``default`` with oneDNN at SSE41 (the lowest paths of
both) and at an AVX2 CPU's pair, and the tests that run oneDNN (``ONEDNN_TESTS``) at every
other oneDNN level the CPU offers (``_paths``): a lowering tuned to one path fails here on
the machine it was written on. These tests are marked ``cpu_paths``: ``make test`` leaves
them out (about 600 CPU-seconds, half its budget), ``make test-cpus`` runs them, and
``.ci/run`` runs both. ``tools/cpu_paths.py`` runs the files at every pair and prints a
table.

Tests marked ``same_on_every_cpu`` are left out of the reruns: they assert a static
refusal (the graph then runs eagerly, eager against eager), integer math, metadata or a
tolerance, nothing one CPU path could give differently, and they pass in the suite's own
run. Mark a test so only when no capability could change its outcome.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.cpu_paths import (
    BIT_FILES,
    ROOT,
    aten_capabilities,
    aten_for,
    onednn_levels,
    onednn_tests,
    path_env,
)

# The paths of the reruns. Every file runs again at ATen's ``default`` with oneDNN at SSE41,
# the farthest path from an AVX-512 CPU's (scalar loops: 13 failures there found in sweep
# 8), and at ``avx2`` with oneDNN at AVX2 (an AVX2-only CPU's pair); the tests that run
# oneDNN (``ONEDNN_TESTS``) at every other level this CPU offers below its own (oneDNN's
# blocking, so its sums' order, changes with the level: an AVX-512 EPYC without FP16 runs
# AVX512_CORE_BF16). ``python tools/cpu_paths.py --paths all`` runs every file at every
# pair.
_WHOLE = ("default", "avx2")


def _paths() -> tuple[list[tuple[str, dict[str, str]]], list[tuple[str, dict[str, str]]]]:
    """(name, environment) of the paths to run every file at, and of those to run the
    oneDNN tests at, besides this process's own. ATen takes the capability it is asked
    for even where the CPU lacks it (then dies of an illegal instruction), and oneDNN
    clamps a level the CPU lacks, so the CPU's support is asked first."""
    own = torch.backends.cpu.get_cpu_capability().lower()
    levels = onednn_levels()
    whole: dict[str, tuple[str, str | None]] = {}
    for cap in aten_capabilities():
        if cap != own and cap in _WHOLE:  # the lowest oneDNN level of a CPU with that cap
            level = next((lv for lv in levels if aten_for(lv) == cap), None)
            whole[f"{cap}+{level or 'ONEDNN'}"] = (cap, level)
    ran = {level for _, level in whole.values()}
    onednn = {f"{aten_for(lv)}+{lv}": (aten_for(lv), lv) for lv in levels[:-1]
              if lv not in ran and aten_for(lv) in aten_capabilities()}
    return ([(name, path_env(*pair)) for name, pair in sorted(whole.items())],
            [(name, path_env(*pair)) for name, pair in sorted(onednn.items())])


# The files run in this many processes per path, so pytest-xdist's workers share them
# (in one process they were the suite's longest test: about 4 minutes on 2 loaded cores);
# one per worker of `make test-cpus`' two: each process pays its own start-up (torch, Dynamo,
# the lowering worker) before its first test.
CHUNKS = 2


def _chunk(i: int) -> list[str]:
    return BIT_FILES[i::CHUNKS]


def _run(name: str, env: dict[str, str], targets: list[str]) -> str:
    """The failures (pytest's report) of ``targets`` run at one path, or ""."""
    # lowered in the test process: no worker to start and no round trip per graph,
    # and the reruns also cover TORCHNEURON_COMPILE_IN_PROCESS (whose wrong quotients
    # test_exact_constant_comparisons pins down)
    env = {**env, "PYTHONPATH": str(ROOT), "TORCHNEURON_COMPILE_LATENCY": "0",
           "TORCHNEURON_COMPILE_IN_PROCESS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-x", "-m", "not same_on_every_cpu", *targets], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=1800)
    return "" if run.returncode == 0 else f"--- at {name}:\n" + run.stdout[-4000:]


_X86_LINUX = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
    reason="ATen's CPU capabilities and oneDNN's levels are x86-64's")


@pytest.mark.cpu_paths
@_X86_LINUX
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_bit_for_bit_files_pass_at_every_cpu_capability(chunk: int) -> None:
    assert BIT_FILES and all(_chunk(i) for i in range(CHUNKS)), "no bit-for-bit test files"
    failed = [_run(name, env, _chunk(chunk)) for name, env in _paths()[0]]
    assert not any(failed), "\n".join(failed)


# one test per level, so make test-cpus' workers share them (each about 40 CPU-seconds)
_ONEDNN_PATHS = dict(_paths()[1]) if sys.platform.startswith("linux") else {}


@pytest.mark.cpu_paths
@_X86_LINUX
@pytest.mark.skipif(not _ONEDNN_PATHS, reason="no oneDNN level between the whole reruns'")
@pytest.mark.parametrize("path", sorted(_ONEDNN_PATHS) or ["none"])
def test_onednn_tests_pass_at_every_onednn_level(path: str) -> None:
    """The tests that run oneDNN, at one of its levels between the whole reruns' (its
    own process): oneDNN's blocking, so its sums' order, changes with the level."""
    failed = _run(path, _ONEDNN_PATHS[path], onednn_tests())
    assert not failed, failed


def test_onednn_tests_are_bit_for_bit_tests_and_levels_follow_the_cpu_flags() -> None:
    """Every listed oneDNN test is in a bit-for-bit file, and the levels come from the
    CPU's flags as oneDNN orders them (a Zen 4: AVX-512 BF16 without AVX-VNNI)."""
    assert {t.split("::")[0] for t in onednn_tests()} <= set(BIT_FILES)
    zen4 = frozenset("sse4_1 avx avx2 avx512f avx512bw avx512vl avx512dq avx512_vnni "
                     "avx512_bf16".split())
    assert onednn_levels(zen4) == ["SSE41", "AVX", "AVX2", "AVX512_CORE", "AVX512_CORE_VNNI",
                                   "AVX512_CORE_BF16"]
    assert onednn_levels(frozenset({"sse4_1", "avx"})) == ["SSE41", "AVX"]
    assert [aten_for(lv) for lv in ("SSE41", "AVX", "AVX2_VNNI", "AVX512_CORE")] == \
        ["default", "default", "avx2", "avx512"]

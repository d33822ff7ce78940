"""The tests that assert eager's bits for compiled graphs and replayed regions, once per
CPU code path this machine offers, each in its own process.

Eager's bits depend on the path ATen (``ATEN_CPU_CAPABILITY``: default, avx2, avx512)
and oneDNN (``ONEDNN_MAX_CPU_ISA``) choose on the CPU they run on, and CI runs on
whatever machine it gets. The suite itself runs at this machine's own capability; here
the same bit-for-bit files run again at every other capability the CPU supports, and
once at ATen's ``default`` with oneDNN held to SSE4.1, the lowest paths of both: a
lowering tuned to one path fails here on the machine it was written on.

Tests marked ``same_on_every_cpu`` are left out of the reruns: they assert a static
refusal (the graph then runs eagerly, eager against eager), integer math, metadata or a
tolerance, nothing one CPU path could give differently, and they pass in the suite's own
run. Mark a test so only when no capability could change its outcome.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cpu_paths import BIT_FILES, ROOT

def _paths() -> list[tuple[str, dict[str, str]]]:
    """(name, environment) of every path to run at besides this process's own. ATen
    takes the capability it is asked for even where the CPU lacks it (then dies of an
    illegal instruction), so the CPU's support is asked first."""
    own = torch.backends.cpu.get_cpu_capability()
    paths: dict[str, dict[str, str]] = {}
    for cap, supported in (("AVX2", torch.cpu._is_avx2_supported()),
                           ("AVX512", torch.cpu._is_avx512_supported())):
        if supported and cap != own:
            paths[cap] = {**os.environ, "ATEN_CPU_CAPABILITY": cap.lower()}
    paths["DEFAULT+SSE41"] = {**os.environ, "ATEN_CPU_CAPABILITY": "default",
                              "ONEDNN_MAX_CPU_ISA": "SSE41"}
    return sorted(paths.items())


# The files run in this many processes per path, so pytest-xdist's workers share them
# (in one process they were the suite's longest test: about 4 minutes on 2 loaded cores);
# one per worker of `make test`'s two: each process pays its own start-up (torch, Dynamo,
# the lowering worker) before its first test.
CHUNKS = 2


def _chunk(i: int) -> list[str]:
    return BIT_FILES[i::CHUNKS]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="ATen's CPU capabilities are x86-64's")
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_bit_for_bit_files_pass_at_every_cpu_capability(chunk: int) -> None:
    assert BIT_FILES and all(_chunk(i) for i in range(CHUNKS)), "no bit-for-bit test files"
    failed = []
    for name, env in _paths():
        # lowered in the test process: no worker to start and no round trip per graph,
        # and the reruns also cover TORCHNEURON_COMPILE_IN_PROCESS (whose wrong quotients
        # test_exact_constant_comparisons pins down)
        env = {**env, "PYTHONPATH": str(ROOT), "TORCHNEURON_COMPILE_LATENCY": "0",
               "TORCHNEURON_COMPILE_IN_PROCESS": "1"}
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
             "-x", "-m", "not same_on_every_cpu", *_chunk(chunk)], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=1800)
        if run.returncode != 0:
            failed.append(f"--- at {name}:\n" + run.stdout[-4000:])
    assert not failed, "\n".join(failed)

"""DDP under ``torch.compile(backend="neuron")`` and FSDP2 under adaptive eager, on two real
ranks, against the same loops on CPU with gloo.

Opt-in (``TORCHNEURON_TEST_DIST_MODES=1``): compiling on two ranks takes over a minute of
wall time on a loaded two-core machine, beyond the distributed tests' budget.
"""

from __future__ import annotations

import os

import pytest

from tests.distributed.launch import run_ranks

pytestmark = pytest.mark.skipif(
    os.environ.get("TORCHNEURON_TEST_DIST_MODES") != "1",
    reason="set TORCHNEURON_TEST_DIST_MODES=1 (two ranks compiling: over a minute)")


def test_ddp_compiled_and_fsdp2_under_adaptive_eager_match_gloo_on_cpu(tmp_path) -> None:
    for rank, res in enumerate(run_ranks("modes", tmp_path, 2, timeout=300)):
        got, ref = res["compile_ddp"]
        assert got == ref, f"rank {rank}: DDP under torch.compile"
        got, ref = res["adaptive_fsdp"]
        assert got == ref, f"rank {rank}: FSDP2 under adaptive eager"
        assert res["adaptive_replays"] > 0

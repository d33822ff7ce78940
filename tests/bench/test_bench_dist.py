"""``torchneuron-bench --nproc 2 --parallel ddp,fsdp``: ranks started by torchrun, as a user
runs it (one bench run of three steps, eager, for the file), and the command's argument
checks (in-process, no launch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchneuron.bench.cli import main
from torchneuron.bench.dist_suite import DIST_FIELDS, nproc_counts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench-dist")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "torchneuron.bench", "--no-progress", "--nproc", "2",
         "--parallel", "ddp,fsdp", "--modes", "eager", "--steps", "3", "--timeout", "240",
         "--out", str(out)], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_one_record_per_parallelism_and_rank_count(dist_run: Path) -> None:
    recs = json.loads((dist_run / "report.json").read_text())
    assert [(r["parallel"], r["mode"], r["nproc"]) for r in recs] == [
        ("ddp", "eager", 1), ("ddp", "eager", 2), ("fsdp", "eager", 1), ("fsdp", "eager", 2)]
    for r in recs:
        assert list(r) == list(DIST_FIELDS)
        assert r["status"] == "ok", (r["reason"], r["traceback"])
        assert r["model"] == "gpt" and r["steps"] == 3 and len(r["step_ms"]) == 3
        assert len(r["steady_ms_per_rank"]) == r["nproc"]
        assert r["steady_ms"] == max(r["steady_ms_per_rank"])
        assert r["max_abs_diff_vs_eager"] == 0


def test_scaling_collectives_and_overlap(dist_run: Path) -> None:
    recs = {(r["parallel"], r["nproc"]): r for r in
            json.loads((dist_run / "report.json").read_text())}
    for par in ("ddp", "fsdp"):
        one, two = recs[(par, 1)], recs[(par, 2)]
        assert one["scaling_efficiency"] == 1.0
        assert one["collective_ms_per_step"] == 0  # a group of one: collectives are free
        assert two["scaling_efficiency"] == round(one["steady_ms"] / two["steady_ms"], 4)
        assert two["scaling_efficiency"] > 0
        assert two["collective_ms_per_step"] > 0 and two["collectives"] > 0
    # DDP's ranks each do one rank's work plus the all-reduce; FSDP2's may do less (each
    # rank's optimizer updates its shard only), so only DDP is bounded by one rank
    assert recs[("ddp", 2)]["scaling_efficiency"] <= 1
    # DDP's bucketed all-reduce and FSDP2's all-gathers / reduce-scatters run on the
    # collective queue while compute goes on: part of their time is hidden
    assert recs[("ddp", 2)]["overlap_pct"] > 0
    assert recs[("fsdp", 2)]["overlap_pct"] > 0
    md = (dist_run / "report.md").read_text()
    assert "torch.distributed.run" in md and "scaling efficiency" in md


def test_rank_counts_and_argument_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert nproc_counts(1) == [1]
    assert nproc_counts(2) == [1, 2]
    assert nproc_counts(4) == [1, 2, 4]
    assert nproc_counts(6) == [1, 2, 4, 6]
    assert main(["--parallel", "ddp"]) == 2
    assert "--parallel needs --nproc" in capsys.readouterr().err
    assert main(["--nproc", "2", "--models", "decode"]) == 2
    assert "not a training workload" in capsys.readouterr().err
    assert main(["--nproc", "2", "--modes", "cpu"]) == 2
    assert "not among" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--nproc", "2", "--parallel", "tp"])

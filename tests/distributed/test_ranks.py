"""Two real ranks under torchrun: every collective, DDP, FSDP2, tensor parallelism, pipeline
schedules and a sharded checkpoint on the "neuron" backend,
each compared with the same code on CPU tensors through gloo in the same processes.

One launch serves every test here (imports dominate a rank's start on a loaded machine); the
ranks' wall-clock timeout kills them, so a failing rank never hangs the suite.
"""

from __future__ import annotations

import pytest
import torch

from tests.distributed.launch import load, run_ranks

NPROC = 2


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("ranks")
    run_ranks("collectives,ddp,ddp_adaptive,fsdp,fsdp_forward_overlap,parallel,faults", d, NPROC, torchrun=True, timeout=150)
    return d


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_every_collective_matches_gloo_on_cpu(outdir) -> None:
    for rank, res in enumerate(load(outdir, "collectives", NPROC)):
        assert len(res["pairs"]) >= 24
        wrong = [name for name, (got, ref) in res["pairs"].items() if not _equal(got, ref)]
        assert not wrong, f"rank {rank}: neuron results differ from gloo on CPU for {wrong}"
        assert torch.equal(res["cpu_through_neuron_group"], torch.full((3,), 3.0))


def test_collectives_end_at_the_same_simulated_moment_on_every_rank(outdir) -> None:
    ranks = load(outdir, "collectives", NPROC)
    names = [*ranks[0]["pairs"], "barrier"]
    ends = [dict(zip(names, r["ends"], strict=True)) for r in ranks]
    # point-to-point too: a send and its receive end at the same moment on both ranks
    assert "send_recv" in names and "batch_isend_irecv" in names
    for n in names:
        assert ends[0][n] == ends[1][n], f"{n}: rank 0 ends at {ends[0][n]}, rank 1 at {ends[1][n]}"
    assert ends[0]["barrier"] > ends[0]["all_reduce_SUM"] > 0


def test_ddp_matches_gloo_on_cpu_and_overlaps(outdir) -> None:
    for rank, res in enumerate(load(outdir, "ddp", NPROC)):
        assert res["neuron"]["losses"] == res["cpu"]["losses"], f"rank {rank}"
        assert _equal(res["neuron"]["params"], res["cpu"]["params"]), f"rank {rank}"
        sim = res["sim"]
        assert sim["collective_ns"] > 0
    a, b = (r["sim"] for r in load(outdir, "ddp", NPROC))
    # the same simulated step and collective time on both ranks; what each waited for
    # differs (the rank that arrives first waits for the other)
    assert (a["step_ns"], a["collective_ns"]) == (b["step_ns"], b["collective_ns"])
    # buckets are reduced while backward still runs: not all collective time is waited for
    assert min(a["exposed_ns"], b["exposed_ns"]) < a["collective_ns"]


def test_ddp_under_adaptive_eager_replays_and_matches_gloo_on_cpu(outdir) -> None:
    for rank, res in enumerate(load(outdir, "ddp_adaptive", NPROC)):
        (losses, params), (ref_losses, ref_params) = res["neuron"], res["cpu"]
        assert losses == ref_losses, f"rank {rank}"
        assert _equal(params, ref_params), f"rank {rank}"
        # the regions between the buckets' all-reduces replay: the buckets' as_strided
        # views run between regions, and the per-parameter bucket views written by
        # backward are not taken for aliased inputs
        assert res["replays"] > 0, res["explain"]
        assert res["refused_ops"].get("aten.as_strided.default") == "storage-layout", res
        assert "aliased-inputs" not in res["fallback_reasons"], res["explain"]


def test_fsdp2_matches_gloo_on_cpu_frees_unsharded_params_and_overlaps(outdir) -> None:
    for rank, res in enumerate(load(outdir, "fsdp", NPROC)):
        assert res["neuron"]["losses"] == res["cpu"]["losses"], f"rank {rank}"
        assert _equal(res["neuron"]["params"], res["cpu"]["params"]), f"rank {rank}"
        assert res["freed_after_forward"] and all(
            n == 0 for step in res["freed_after_forward"] for n in step), res["freed_after_forward"]
    a, b = (r["sim"] for r in load(outdir, "fsdp", NPROC))
    assert a["collective_ns"] == b["collective_ns"] > 0
    # the all-gathers FSDP2 prefetches in backward and its reduce-scatters run under side
    # streams: the compute queue does not wait for all of their time (the rank that
    # arrives first also waits for the other: the lesser of the two)
    assert min(a["exposed_ns"], b["exposed_ns"]) < a["collective_ns"], (a, b)


def test_fsdp2_forward_all_gathers_overlap_the_previous_layers_compute(outdir) -> None:
    """Device-bound layers: FSDP2 issues layer i+1's copy-in and all-gather under its side
    streams while layer i's matmul runs; they depend only on the shards, so the all-gather
    runs beside the matmul and the forward waits for (almost) none of it. Before side
    streams ordered their own work, each all-gather waited for the matmul issued before it
    and its whole time was exposed."""
    for rank, res in enumerate(load(outdir, "fsdp_forward_overlap", NPROC)):
        sim = res["sim"]
        assert sim["collectives"] == 3 and sim["collective_ns"] > 0, sim
        assert res["compute_ns"] > 10 * sim["collective_ns"], res  # device-bound
        assert sim["exposed_ns"] <= 0.1 * sim["collective_ns"], f"rank {rank}: {sim}"


def test_tensor_parallel_pipeline_schedules_and_sharded_checkpoint(outdir) -> None:
    for rank, res in enumerate(load(outdir, "parallel", NPROC)):
        assert _equal(res["tp_neuron"], res["tp_cpu"]), f"rank {rank}: tensor parallel"
        for sched in ("ScheduleGPipe", "Schedule1F1B"):
            assert _equal(res[f"{sched}_neuron"], res[f"{sched}_cpu"]), f"rank {rank}: {sched}"
        saved, loaded = res["dcp"]
        assert _equal(saved, loaded), f"rank {rank}: checkpoint"
    last = load(outdir, "parallel", NPROC)[1]
    assert len(last["ScheduleGPipe_neuron"]) == 4 + 2  # the last stage's 4 losses, w and b


def test_mismatch_and_stalled_rank_raise_instead_of_hanging(outdir) -> None:
    res = torch.load(outdir / "faults.0.pt", weights_only=False)
    assert "different size or dtype" in res["mismatch"], res["mismatch"]
    assert res["stalled_peer"] != "no error"
    assert res["stalled_peer_s"] < 30

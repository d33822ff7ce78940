"""One rank of the distributed tests: ``python tests/distributed/_worker.py SCENARIO OUTDIR``.

Started by ``launch.py`` (plain processes with the env torchrun sets, or torchrun itself).
Each scenario runs on the neuron group and, as the reference, the same code on CPU tensors
through a gloo group in the same processes (what AWS's tutorial compares), then saves what
the test asserts to ``OUTDIR/<scenario>.<rank>.pt``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

import torchneuron  # noqa: F401  (registers the device and the "neuron" backend)
from torchneuron.hardware import get_core
from torchneuron.hardware.collectives import collective_queue

DEV = torch.device("neuron")


def _ends() -> int:
    return collective_queue(get_core(0)).free_ns


def collectives(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    """Every collective on neuron tensors vs the same call on CPU tensors through gloo."""
    out: dict = {"ends": [], "pairs": {}}

    def both(name: str, fn) -> None:  # fn(device, group) -> tensor or list of tensors
        got = fn(DEV, None)
        ref = fn(torch.device("cpu"), gloo)
        got = [t.cpu() for t in got] if isinstance(got, list) else [got.cpu()]
        ref = ref if isinstance(ref, list) else [ref]
        out["pairs"][name] = (got, ref)
        out["ends"].append(_ends())

    def base(d: torch.device, dtype=torch.float32) -> torch.Tensor:
        return (torch.arange(8, dtype=torch.float32) * 0.37 + rank * 1.3 + 0.1).to(dtype).to(d)

    for op in ("SUM", "PRODUCT", "MIN", "MAX"):
        def ar(d, g, op=op):
            t = base(d)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=g)
            return t
        both(f"all_reduce_{op}", ar)
    for op in ("BAND", "BOR", "BXOR"):
        def ari(d, g, op=op):
            t = (torch.arange(8) + 3 * rank).to(d)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=g)
            return t
        both(f"all_reduce_{op}", ari)

    def avg(d, g):
        t = base(d)
        if g is None:
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            return t
        dist.all_reduce(t, group=g)  # gloo has no AVG: SUM, then the division
        return t / world
    both("all_reduce_AVG", avg)

    def bcast(d, g):
        t = base(d)
        dist.broadcast(t, src=1, group=g)
        return t
    both("broadcast", bcast)

    def red(d, g):
        t = base(d)
        dist.reduce(t, dst=0, group=g)
        return t if rank == 0 else torch.zeros(1, device=d)
    both("reduce", red)

    def ag(d, g):
        outs = [torch.empty(8, device=d) for _ in range(world)]
        dist.all_gather(outs, base(d), group=g)
        return outs
    both("all_gather", ag)

    def agit(d, g):
        o = torch.empty(8 * world, device=d)
        dist.all_gather_into_tensor(o, base(d), group=g)
        return o
    both("all_gather_into_tensor", agit)

    def rs(d, g):
        o = torch.empty(8, device=d)
        dist.reduce_scatter(o, [base(d) * (i + 1) for i in range(world)], group=g)
        return o
    both("reduce_scatter", rs)

    def rst(d, g):
        o = torch.empty(4, device=d)
        dist.reduce_scatter_tensor(o, base(d), group=g)
        return o
    both("reduce_scatter_tensor", rst)

    def a2a(d, g):
        o = torch.empty(8, device=d)
        dist.all_to_all_single(o, base(d), group=g)
        return o
    both("all_to_all_single", a2a)

    def a2a_uneven(d, g):  # rank r sends r+1 rows to every rank
        i = base(d)[: (rank + 1) * world]
        o = torch.empty(sum(r + 1 for r in range(world)), device=d)
        dist.all_to_all_single(o, i, [r + 1 for r in range(world)], [rank + 1] * world,
                               group=g)
        return o
    both("all_to_all_single_uneven", a2a_uneven)

    def a2a_list(d, g):
        outs = [torch.empty(4, device=d) for _ in range(world)]
        dist.all_to_all(outs, [base(d)[4 * (i % 2):4 * (i % 2) + 4] * (i + 1)
                               for i in range(world)], group=g)
        return outs
    both("all_to_all", a2a_list)

    def gath(d, g):
        outs = [torch.empty(8, device=d) for _ in range(world)] if rank == 0 else None
        dist.gather(base(d), outs, dst=0, group=g)
        return outs if rank == 0 else torch.zeros(1, device=d)
    both("gather", gath)

    def scat(d, g):
        o = torch.empty(8, device=d)
        dist.scatter(o, [base(d) * (i + 2) for i in range(world)] if rank == 0 else None,
                     src=0, group=g)
        return o
    both("scatter", scat)

    def p2p(d, g):
        peer = (rank + 1) % world
        src = (rank - 1) % world
        r = torch.empty(8, device=d)
        ops = [dist.P2POp(dist.isend, base(d), peer, group=g),
               dist.P2POp(dist.irecv, r, src, group=g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return r
    both("batch_isend_irecv", p2p)

    def send_recv(d, g):
        t = base(d) * 3
        if rank == 0:
            dist.send(t, 1, group=g)
            return t
        dist.recv(t, 0, group=g)
        return t
    both("send_recv", send_recv)

    def late_receiver(d, g):  # the receiver computes first: it arrives after the sender
        t = base(d) * 5
        if rank == 0:
            dist.send(t, 1, group=g)
            return t
        w = torch.ones(256, 256, device=d)
        for _ in range(4):
            w = w @ w / 256
        dist.recv(t, 0, group=g)
        return t + w[0, :8] * 0
    both("send_recv_late_receiver", late_receiver)

    def async_ar(d, g):
        t = base(d)
        w = dist.all_reduce(t, async_op=True, group=g)
        w.wait()
        return w.get_future().value()[0]
    both("all_reduce_async", async_ar)

    def coalesced(d, g):
        ts = [base(d), base(d) * 2]
        dist.all_reduce_coalesced(ts, group=g)
        return ts
    both("all_reduce_coalesced", coalesced)

    def objects(d, g):
        objs: list = [None] * world
        dist.all_gather_object(objs, {"rank": rank, "x": [rank] * 3}, group=g)
        return torch.tensor([o["rank"] for o in objs])
    both("all_gather_object", objects)

    def funcol(d, g):
        import torch.distributed._functional_collectives as fc

        group = g if g is not None else dist.group.WORLD
        a = fc.all_reduce(base(d), "sum", group)
        b = fc.all_gather_tensor(base(d), 0, group)
        c = fc.reduce_scatter_tensor(base(d), "sum", 0, group)
        return [fc.wait_tensor(a), fc.wait_tensor(b), fc.wait_tensor(c)]
    both("functional", funcol)

    cpu = torch.ones(3) * (rank + 1)
    dist.all_reduce(cpu)  # CPU tensors through the neuron group
    out["cpu_through_neuron_group"] = cpu
    dist.barrier()
    out["ends"].append(_ends())
    return out


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def _batches(rank: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)) for _ in range(n)]


def ddp(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    """DDP with small buckets, ``no_sync`` gradient accumulation, on neuron and on CPU/gloo."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    res = {}
    for name, dev, group in (("neuron", DEV, None), ("cpu", torch.device("cpu"), gloo)):
        model = _model().to(dev)
        m = DDP(model, process_group=group, bucket_cap_mb=0.002)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        losses = []
        core = get_core(0)
        t0 = core.timeline.device_free_ns
        busy0, coll0 = core.timeline.device_busy_ns, collective_queue(core).busy_ns
        exposed0 = collective_queue(core).exposed_ns
        for step, (x, y) in enumerate(_batches(rank, 4)):
            accumulate = step % 2 == 0
            with m.no_sync() if accumulate else contextlib.nullcontext():
                loss = ((m(x.to(dev)) - y.to(dev)) ** 2).mean()
                loss.backward()
            if not accumulate:
                opt.step()
                opt.zero_grad()
            losses.append(loss.item())
        res[name] = {"losses": losses,
                     "params": [p.detach().cpu().clone() for p in model.parameters()]}
        if name == "neuron":
            torchneuron.device.module.synchronize()
            res["sim"] = {"step_ns": core.timeline.device_free_ns - t0,
                          "compute_ns": core.timeline.device_busy_ns - busy0,
                          "collective_ns": collective_queue(core).busy_ns - coll0,
                          "exposed_ns": collective_queue(core).exposed_ns - exposed0}
    return res


def ddp_adaptive(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    """DDP (small buckets) under adaptive eager on neuron vs the same loop on CPU/gloo.
    (SGD with foreach: the per-tensor ``add_(alpha=)`` update compiles 1 ulp off eager.)"""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def loop(dev: torch.device, group) -> tuple[list[float], list[torch.Tensor]]:
        model = _model().to(dev)
        m = DDP(model, process_group=group, bucket_cap_mb=0.002)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, foreach=True)
        data = [(x.to(dev), y.to(dev)) for x, y in _batches(rank, 4)]
        losses = []
        for step in range(10):
            x, y = data[step % 4]
            loss = ((m(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses, [p.detach().cpu().clone() for p in model.parameters()]

    ae = torchneuron.adaptive_eager
    ae.reset()
    ae.enable()
    try:
        got = loop(DEV, None)
    finally:
        ae.disable()
    st = ae.stats()
    return {"neuron": got, "cpu": loop(torch.device("cpu"), gloo), "replays": st["replays"],
            "fallback_reasons": dict(st["fallback_reasons"]),
            "refused_ops": dict(st["refused_ops"]), "explain": ae.explain()}


def fsdp(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    """FSDP2 ``fully_shard`` per layer and at the root, on neuron and on CPU/gloo."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    res = {}
    for name, dev in (("neuron", DEV), ("cpu", torch.device("cpu"))):
        if name == "neuron":
            mesh = init_device_mesh("neuron", (world,))
        else:
            mesh = DeviceMesh.from_group(gloo, "cpu")
        model = _model().to(dev)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        first = model[0]._get_fsdp_state()._fsdp_param_group.fsdp_params[0]
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        losses, mem = [], []
        sim0 = torchneuron.distributed.stats(0)
        for x, y in _batches(rank, 3):
            loss = ((model(x.to(dev)) - y.to(dev)) ** 2).mean()
            if name == "neuron":
                mem.append(("after_forward", torchneuron.device.module.memory_allocated()))
                # layer 0 reshards after its forward: its all-gather output is freed
                res.setdefault("freed_after_forward", []).append(
                    [t.buffer.untyped_storage().nbytes() for t in first.all_gather_outputs])
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
            if name == "neuron":
                mem.append(("after_step", torchneuron.device.module.memory_allocated()))
        if name == "neuron":
            sim1 = torchneuron.distributed.stats(0)
            res["sim"] = {k: sim1[k] - sim0[k] for k in ("collective_ns", "exposed_ns")}
        res[name] = {"losses": losses,
                     "params": [p.full_tensor().detach().cpu() for p in model.parameters()]}
        if name == "neuron":
            res["mem"] = mem
            res["peak"] = torchneuron.device.module.max_memory_allocated()
            res["unsharded_bytes"] = sum(p.numel() * 4 for p in _model().parameters())
    return res


def fsdp_forward_overlap(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    """FSDP2's forward when the device, not the host, is the bottleneck (1024-wide layers
    on 2048 rows): each layer's all-gather is issued (under FSDP2's side streams) while
    the previous layer's matmul still runs. Simulated figures of the second forward."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(1024, 1024) for _ in range(3))).to(DEV)
    mesh = init_device_mesh("neuron", (world,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    x = torch.randn(2048, 1024, device=DEV)
    core = get_core(0)
    with torch.no_grad():
        for _ in range(2):
            sim0, busy0 = torchneuron.distributed.stats(0), core.timeline.device_busy_ns
            out = model(x).sum()  # the sum settles the last wait (exposure is settled
            torch.neuron.synchronize()  # when the next work is issued)
            sim1 = torchneuron.distributed.stats(0)
    return {"sim": {k: sim1[k] - sim0[k] for k in ("collectives", "collective_ns", "exposed_ns")},
            "compute_ns": core.timeline.device_busy_ns - busy0, "out": out.item()}


def parallel(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    """Tensor parallelism (DTensor, Colwise/Rowwise), pipeline schedules (GPipe, 1F1B) on
    neuron and on CPU/gloo; a sharded checkpoint (DCP) saved and loaded on neuron."""
    import tempfile

    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    def mlp() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))

    res: dict = {}
    for name, dev, grp in (("neuron", DEV, None), ("cpu", torch.device("cpu"), gloo)):
        mesh = init_device_mesh("neuron", (world,)) if grp is None else DeviceMesh.from_group(
            grp, "cpu")
        m = parallelize_module(mlp().to(dev), mesh, {"0": ColwiseParallel(),
                                                     "2": RowwiseParallel()})
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(5)).to(dev)
        out = m(x)
        out.sum().backward()
        res[f"tp_{name}"] = [out.detach().cpu(), m[0].weight.grad.to_local().cpu(),
                             m[2].weight.grad.to_local().cpu()]
        for sched_cls in (ScheduleGPipe, Schedule1F1B):
            torch.manual_seed(0)
            full = nn.Sequential(*(nn.Linear(8, 8) for _ in range(world)))
            stage_mod = full[rank].to(dev)
            stage = PipelineStage(stage_mod, rank, world, dev, group=grp)
            sched = sched_cls(stage, n_microbatches=4,
                              loss_fn=lambda o, t: ((o - t) ** 2).mean())
            x = torch.randn(8, 8, generator=torch.Generator().manual_seed(1)).to(dev)
            t = torch.randn(8, 8, generator=torch.Generator().manual_seed(2)).to(dev)
            losses: list = []
            if rank == 0:
                sched.step(x)
            else:
                sched.step(target=t, losses=losses)
            res[f"{sched_cls.__name__}_{name}"] = (
                [v.detach().cpu() for v in losses] + [p.grad.cpu() for p in stage_mod.parameters()])
    mesh = init_device_mesh("neuron", (world,))
    m = mlp().to(DEV)
    fully_shard(m, mesh=mesh)
    path = [tempfile.mkdtemp(prefix="tn-dcp-") if rank == 0 else None]
    dist.broadcast_object_list(path, src=0)
    dcp.save({"model": m.state_dict()}, checkpoint_id=path[0])
    torch.manual_seed(1)
    m2 = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).to(DEV)
    fully_shard(m2, mesh=mesh)
    sd = {"model": m2.state_dict()}
    dcp.load(sd, checkpoint_id=path[0])
    m2.load_state_dict(sd["model"])
    res["dcp"] = ([a.full_tensor().cpu() for a in m.parameters()],
                  [b.full_tensor().cpu() for b in m2.parameters()])
    return res


def modes(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    """DDP under torch.compile(backend="neuron") and FSDP2 under adaptive eager, each against
    the same loop on CPU/gloo."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    def loop(dev: torch.device, group, par: str, compiled: bool) -> list[float]:
        model = _model().to(dev)
        if par == "ddp":  # (default buckets: Dynamo's DDPOptimizer wants the first smallest)
            m = DDP(model, process_group=group)
        else:
            mesh = (init_device_mesh("neuron", (world,)) if group is None
                    else DeviceMesh.from_group(group, "cpu"))
            for layer in model:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=mesh)
            m = fully_shard(model, mesh=mesh)
        fwd = torch.compile(m, backend="neuron") if compiled else m
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        losses = []
        for x, y in _batches(rank, 5):
            loss = ((fwd(x.to(dev)) - y.to(dev)) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    cpu = torch.device("cpu")
    res = {"compile_ddp": (loop(DEV, None, "ddp", True), loop(cpu, gloo, "ddp", False))}
    torchneuron.adaptive_eager.enable()
    try:
        got = loop(DEV, None, "fsdp", False)
    finally:
        torchneuron.adaptive_eager.disable()
    res["adaptive_fsdp"] = (got, loop(cpu, gloo, "fsdp", False))
    res["adaptive_replays"] = torchneuron.adaptive_eager.stats()["replays"]
    return res


def faults(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    """Mismatched shapes raise a clear error on every rank; a rank that stops answering makes
    the other's collective fail within the group's timeout (never a hang). Runs last."""
    import time

    res: dict = {}
    try:
        dist.all_reduce(torch.ones(4 + rank, device=DEV))
        res["mismatch"] = "no error"
    except RuntimeError as e:
        res["mismatch"] = str(e)
    short = dist.new_group(timeout=timedelta(seconds=3))
    dist.barrier(group=short)
    if rank == 1:
        time.sleep(5)  # silent past the group's timeout, then leaves cleanly
        os._exit(0)
    t = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4, device=DEV), group=short)
        res["stalled_peer"] = "no error"
    except RuntimeError as e:
        res["stalled_peer"] = f"{type(e).__name__}: {e}"[:300]
    res["stalled_peer_s"] = time.monotonic() - t
    return res


SCENARIOS = {"collectives": collectives, "ddp": ddp, "ddp_adaptive": ddp_adaptive,
             "fsdp": fsdp, "fsdp_forward_overlap": fsdp_forward_overlap, "parallel": parallel, "modes": modes, "faults": faults}


def main() -> None:
    names, outdir = sys.argv[1].split(","), sys.argv[2]
    timeout = float(os.environ.get("TN_DIST_TIMEOUT", "20"))
    dist.init_process_group("neuron", timeout=timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    for name in names:
        res = SCENARIOS[name](rank, world, gloo)
        torch.save(res, os.path.join(outdir, f"{name}.{rank}.pt"))
    if "faults" in names:
        os._exit(0)  # the group has lost a rank: nothing left to tear down
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

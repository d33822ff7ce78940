"""Data-parallel training on simulated NeuronCores, launched by torchrun.

    torchrun --nproc-per-node 2 examples/distributed/train.py --parallel ddp
    torchrun --nproc-per-node 2 examples/distributed/train.py --parallel fsdp
    torchrun --nproc-per-node 2 examples/distributed/train.py --parallel ddp --device cpu

The same script runs on CPU with gloo (``--device cpu``), as AWS's tutorial compares them:
each rank prints its losses, which agree between the two runs. On neuron each rank also
prints its simulated step time and how much of the collectives' time overlapped compute.
"""

from __future__ import annotations

import argparse
import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 128, d: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp")
    parser.add_argument("--device", choices=["neuron", "cpu"], default="neuron")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    if args.device == "neuron":
        import torchneuron  # noqa: F401  (the neuron device and backend)
    dist.init_process_group("neuron" if args.device == "neuron" else "gloo")
    rank = dist.get_rank()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = TinyGPT().to(device)
    if args.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, bucket_cap_mb=0.05)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(args.device, (dist.get_world_size(),))
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1000 + rank)
    sim = contextlib.nullcontext()
    for step in range(args.steps):
        idx = torch.randint(0, 128, (4, 16), generator=g)
        with sim:
            logits = model(idx.to(device))
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten().to(device))
            loss.backward()
            opt.step()
            opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
    if args.device == "neuron":
        import torchneuron.distributed as tnd
        from torchneuron.hardware import get_core

        torch.neuron.synchronize()
        tl = get_core(torch.neuron.current_device()).timeline
        s = tnd.stats(torch.neuron.current_device())
        print(f"rank {rank} simulated {tl.device_free_ns / 1e6:.3f} ms for {args.steps} steps; "
              f"compute {tl.device_busy_ns / 1e6:.3f} ms; {s['collectives']} collectives "
              f"{s['collective_ns'] / 1e6:.3f} ms, exposed {s['exposed_ns'] / 1e6:.3f} ms "
              f"(overlap {s['overlap']:.0%})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Streams without syncs, growing shapes and varying batches; random op programs."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import assert_same, run


def test_loop_that_never_syncs_finds_its_period() -> None:
    def loop(device: str) -> dict:
        g = torch.Generator().manual_seed(1)
        w = (torch.randn(8, 8, generator=g) * 0.3).to(device)
        x = torch.randn(4, 8, generator=g).to(device)
        acc = torch.zeros(4, 8, device=device)
        for _ in range(100):
            x = torch.tanh(x @ w) * 0.9 + 0.1
            acc.add_(x)
        return {"x": x, "acc": acc}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive)
    periodic = [r for r in ae.regions() if r.periodic]
    assert periodic and ae.stats()["replays"] >= 3, ae.explain()


def _greedy_decoding(steps: int, per_step: list[tuple[int, int, int]] | None = None
                     ) -> Callable[[str], dict]:
    """Greedy decoding with a KV cache that grows one token per step, ``.item()`` on each
    token: a two-layer pre-LN decoder (projections, an MLP and the logits have fixed
    shapes; the ``cat`` onto each layer's cache and the attention over it grow). The loop
    both decoding tests run; ``per_step`` gets each step's (ops deferred, ops recorded, ops
    run between regions) under adaptive eager."""
    torch.manual_seed(0)
    d, vocab, layers = 16, 12, 2
    emb, head, ln_f = nn.Embedding(vocab, d), nn.Linear(d, vocab), nn.LayerNorm(d)
    blocks = [nn.ModuleDict({"ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d),
                             "proj": nn.Linear(d, d), "ln2": nn.LayerNorm(d),
                             "fc": nn.Linear(d, 2 * d), "out": nn.Linear(2 * d, d)})
              for _ in range(layers)]

    def loop(device: str) -> dict:
        e, h, lf = emb.to(device), head.to(device), ln_f.to(device)
        bs = [b.to(device) for b in blocks]
        with torch.no_grad():
            tok = torch.tensor([[3]]).to(device)
            cache = [(torch.zeros(1, 0, d, device=device),) * 2 for _ in bs]
            tokens, logits = [], []
            for _ in range(steps):
                before = ae.stats() if per_step is not None else None
                x = e(tok)
                for i, b in enumerate(bs):
                    q, k, v = b["qkv"](b["ln1"](x)).split(d, dim=-1)
                    keys = torch.cat([cache[i][0], k], dim=1)  # the cache grows one token
                    values = torch.cat([cache[i][1], v], dim=1)
                    cache[i] = (keys, values)
                    att = torch.softmax(q @ keys.transpose(1, 2) * d ** -0.5, -1) @ values
                    x = x + b["proj"](att)
                    x = x + b["out"](F.gelu(b["fc"](b["ln2"](x))))
                out = h(lf(x))[:, -1]
                tok = out.argmax(-1, keepdim=True)
                logits.append(out)
                tokens.append(tok.item())
                if before is not None:
                    after = ae.stats()
                    per_step.append(tuple(after[k] - before[k] for k in (
                        "ops_deferred", "ops_recorded", "ops_between_regions")))
        return {"tokens": torch.tensor(tokens), "logits": torch.cat(logits),
                "keys": cache[-1][0]}

    return loop


def test_greedy_decoding_with_growing_kv_cache() -> None:
    loop = _greedy_decoding(10)
    assert_same(run(loop, "neuron"), run(loop, "neuron", adaptive=True))


def test_encoder_fed_batches_of_varying_sizes() -> None:
    torch.manual_seed(0)
    enc = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.Linear(12, 4))

    def loop(device: str) -> dict:
        m = enc.to(device)
        g = torch.Generator().manual_seed(2)
        outs = []
        with torch.no_grad():
            for b in [4, 4, 4, 3, 4, 4, 2, 4, 3, 3, 3]:
                y = m(torch.randn(b, 6, generator=g).to(device)).softmax(-1)
                outs.append(torch.tensor([y.sum(0).max().item()]))
        return {"outs": torch.cat(outs)}

    assert_same(run(loop, "neuron"), run(loop, "neuron", adaptive=True))
    assert ae.stats()["replays"] >= 2, ae.explain()


_OPS = ["add", "mul", "tanh", "relu", "matmul", "view", "transpose", "iadd", "sync", "read_mid",
        "external_write"]


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(prog=st.lists(st.sampled_from(_OPS), min_size=3, max_size=8),
       diverge=st.integers(0, 5), steps=st.integers(4, 6))
def test_random_programs_give_eager_results(prog: list[str], diverge: int, steps: int) -> None:
    def loop(device: str) -> dict:
        g = torch.Generator().manual_seed(3)
        w = torch.randn(4, 4, generator=g).to(device)
        ext = torch.zeros(4, 4, device=device)
        reads = []
        for step in range(steps):
            h = torch.randn(4, 4, generator=g).to(device)
            for i, op in enumerate(prog):
                if op == "add":
                    h = h + w
                elif op == "mul":
                    h = h * (0.5 if step != diverge or i else 0.25)  # a scalar that changes once
                elif op == "tanh":
                    h = h.tanh()
                elif op == "relu":
                    h = h.relu()
                elif op == "matmul":
                    h = h @ w
                elif op == "view":
                    h = h.reshape(2, 8).view(4, 4)
                elif op == "transpose":
                    h = h.t()
                elif op == "iadd":
                    h.add_(1.0)
                elif op == "sync":
                    reads.append(h.sum().item())
                elif op == "read_mid" and step == diverge:
                    reads.append(h[0, 0].item())
                elif op == "external_write":
                    ext.add_(h.t())
            reads.append(h.abs().sum().item())
        return {"reads": torch.tensor(reads), "ext": ext, "w": w}

    ae.reset()
    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive, rtol=1e-4, atol=1e-4)


def test_greedy_decoding_with_growing_kv_cache_replays() -> None:
    """The ops whose shapes grow run eagerly between regions; the fixed-shape pieces
    between them (shared by both layers where they agree) replay: most ops of a late step
    are deferred, with eager's tokens and logits, and the same on a second run."""
    eager = run(_greedy_decoding(24), "neuron")
    runs = []
    for _ in range(2):
        ae.reset()
        per_step: list[tuple[int, int, int]] = []
        adaptive = run(_greedy_decoding(24, per_step), "neuron", adaptive=True)
        assert_same(eager, adaptive, rtol=1e-5, atol=1e-6, exact=("tokens",))
        deferred, recorded, between = per_step[-1]
        assert between > 0 and deferred > recorded + between, (per_step, ae.explain())
        assert ae.stats()["side_exits"] == 0, ae.explain()
        runs.append((adaptive["_ns"], per_step))
    assert runs[0] == runs[1]  # deterministic: same replayed steps, same simulated time

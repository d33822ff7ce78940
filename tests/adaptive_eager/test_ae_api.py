"""The user-facing surface issue 8 lists: switching adaptive eager on without touching
the script, ``stats()``, ``explain()`` and the logging channel, memory accounting and
views under replay, and the tunables that bound regions."""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import assert_same, run
from torchneuron.adaptive_eager.replay import Replay
from torchneuron.hardware.settings import override

_ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = str(_ROOT / "tests/adaptive_eager/api_script.py")
STEPS, K = 6, 4


def _mlp_loop(device: str) -> dict:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)
    losses, mem = [], []
    for _ in range(STEPS):
        loss = F.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if device == "neuron":
            mem.append(torch.neuron.memory_allocated())
    return {"losses": torch.tensor(losses), "_mem": mem}


@pytest.mark.parametrize("how", ["env", "run-module"])
def test_an_unmodified_script_replays_without_code_changes(how: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "TORCHNEURON_COMPILE_LATENCY": "0",
           "TORCHNEURON_CACHE": "0"}
    if how == "env":
        cmd = [sys.executable, _SCRIPT]
        env["TORCHNEURON_ADAPTIVE_EAGER"] = "1"
    else:
        cmd = [sys.executable, "-m", "torchneuron.run", _SCRIPT]
        env.pop("TORCHNEURON_ADAPTIVE_EAGER", None)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert stats["enabled"] and stats["replays"] >= 1, stats
    if how == "run-module":  # the summary when the script ends
        assert "adaptive eager:" in out.stderr and "simulated host time" in out.stderr, out.stderr


def test_stats_explain_and_the_logging_channel(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="torchneuron.adaptive_eager"):
        run(_mlp_loop, "neuron", adaptive=True)
    s = ae.stats()
    for key in ("ops_recorded", "regions_detected", "compilations", "cache_hits", "replays",
                "side_exits", "fallback_reasons", "compile_wall_stall_s"):
        assert key in s, (key, s)
    assert isinstance(s["fallback_reasons"], dict)
    assert s["ops_recorded"] > 0 and s["regions_detected"] >= 1 and s["replays"] >= 1, s
    assert s["compile_wall_stall_s"] >= 0.0
    text = ae.explain()
    for part in (" ops, seen ", "state ready", "executable: region_", "replays ", "side exits: "):
        assert part in text, (part, text)
    region = next(r for r in ae.regions() if r.replays)
    assert len(region.format().splitlines()) == len(region)  # one op per line
    assert any(r.name == "torchneuron.adaptive_eager" for r in caplog.records)


def test_memory_allocated_is_eagers_and_out_of_memory_is_eagers_error() -> None:
    eager = run(_mlp_loop, "neuron")
    adaptive = run(_mlp_loop, "neuron", adaptive=True)
    assert ae.stats()["replays"] >= 1, ae.explain()
    assert_same(eager, adaptive)
    assert adaptive["_mem"] == eager["_mem"]  # after each step's sync: materialized values

    def oom(device: str) -> dict:
        w = torch.randn(8, 8).to(device)
        errors, outs = [], []
        for step in range(STEPS):
            h = (w * 2).tanh()
            try:
                if step == K:  # inside the replayed region: far beyond the device's HBM
                    h = h + torch.empty(1 << 40, 8, device=device)[:8]
            except RuntimeError as e:
                errors.append((type(e).__name__, str(e).splitlines()[0]))
            outs.append(torch.tensor([(h @ w).sum().item()]))
        mem = torch.neuron.memory_allocated()
        return {"outs": torch.cat(outs), "_errors": errors, "_mem": mem}

    eager = run(oom, "neuron")
    adaptive = run(oom, "neuron", adaptive=True)
    s = ae.stats()
    assert s["replays"] >= 1 and s["side_exits"] >= 1, ae.explain()  # step K was replaying
    assert len(eager["_errors"]) == 1 and adaptive["_errors"] == eager["_errors"]
    assert "out of memory" in eager["_errors"][0][1].lower(), eager["_errors"]
    assert_same(eager, adaptive)
    assert adaptive["_mem"] == eager["_mem"]


def test_ended_replays_wait_for_no_garbage_collection() -> None:
    """An ended replay is freed as soon as nothing holds its values, like eager's
    temporaries: in a reference cycle, every step's replay (with the arguments it held,
    and their simulated memory) waited for the garbage collector."""
    gc.collect()
    before = {id(o) for o in gc.get_objects() if type(o) is Replay}  # earlier tests'
    gc.disable()
    try:
        with ae.enabled():
            torch.manual_seed(0)
            m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)).to("neuron")
            opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
            x, y = torch.randn(8, 16).to("neuron"), torch.randn(8, 4).to("neuron")
            for _ in range(3 * STEPS):
                loss = F.mse_loss(m(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                loss.item()
            alive = sum(type(o) is Replay and id(o) not in before for o in gc.get_objects())
    finally:
        gc.enable()
    assert ae.stats()["replays"] >= 2 * STEPS, ae.explain()
    assert alive <= 2, f"{alive} replays in memory"  # the last step's, held by its values


def test_views_stay_views_of_their_base() -> None:
    def loop(device: str) -> dict:
        g = torch.Generator().manual_seed(1)
        buf = torch.zeros(4, 6, device=device)
        checks = []
        for _ in range(STEPS):
            x = torch.randn(4, 2, generator=g).to(device)
            v = buf[:, 1:3]  # a view, written in place inside the region
            v.add_(x.tanh())
            buf.mul_(0.9)
            checks.append(v._base is buf and v.data_ptr() == buf.data_ptr() + 4 * 1)
            total = buf.sum().item()
            checks.append(abs(total - v.sum().item()) < 1e-4)  # only the view's columns moved
        return {"buf": buf, "_checks": checks}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert ae.stats()["replays"] >= 1, ae.explain()
    assert all(eager["_checks"]) and adaptive["_checks"] == eager["_checks"]
    assert_same(eager, adaptive)


def test_region_length_is_capped_and_still_replays() -> None:
    with override(ae_max_region_ops=12):
        eager = run(_mlp_loop, "neuron")
        adaptive = run(_mlp_loop, "neuron", adaptive=True)
        assert_same(eager, adaptive)
        assert ae.regions() and max(len(r) for r in ae.regions()) <= 12, ae.explain()
        assert ae.stats()["replays"] >= 1, ae.explain()


def test_a_region_that_would_not_pay_is_not_compiled() -> None:
    with override(ae_min_gain_ns=10**12):
        eager = run(_mlp_loop, "neuron")
        adaptive = run(_mlp_loop, "neuron", adaptive=True)
    assert_same(eager, adaptive)
    s = ae.stats()
    assert s["compilations"] == 0 and s["replays"] == 0, s
    assert s["fallback_reasons"].get("no-gain", 0) >= 1, s


def test_values_nobody_holds_are_not_materialized() -> None:
    # The step's ~40 ops make ~30 intermediates (activations, gradients); the user holds
    # only the loss at the region's end (zero_grad drops the gradients before the
    # ``.item()``), so the compiled region returns the loss alone and writes back the
    # parameters and momentum buffers in place.
    def loop(device: str) -> dict:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)
        losses = []
        for _ in range(STEPS):
            loss = F.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return {"losses": torch.tensor(losses), **m.state_dict()}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive)
    region = next((r for r in ae.regions() if r.replays), None)
    assert region is not None, ae.explain()
    outputs = next(n for n in region.graph.graph.nodes if n.op == "output").args[0]
    assert len(region) > 30 and len(outputs) == 1, (len(region), outputs)


def test_torch_compile_traces_torch_tensor_after_disable() -> None:
    """``enable()`` swaps ``torch.tensor`` for a wrapper. Dynamo maps torch's functions to
    its rules once, by object: a map built while the wrapper was in place must not leave
    the restored original unknown, or ``fullgraph=True`` fails on ``torch.tensor``."""
    import torch._dynamo.trace_rules as trace_rules

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * torch.tensor([1.5, -2.0], device=x.device)

    trace_rules.get_torch_obj_rule_map.cache_clear()
    ae.enable()
    try:
        trace_rules.get_torch_obj_rule_map()  # Dynamo's map, built while enabled
    finally:
        ae.disable()
    torch._dynamo.reset()
    x = torch.randn(3, 2)
    got = torch.compile(fn, backend="neuron", fullgraph=True)(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), fn(x), rtol=0, atol=0)

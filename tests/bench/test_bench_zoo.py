"""The zoo: ordinary PyTorch that knows nothing of torchneuron, same numbers on the device.

Each workload is built twice from the same seed, on plain CPU PyTorch and on ``neuron``,
and two steps of each must agree (losses, logits, tokens; then parameters and buffers):
the bench's "max diff vs eager" column rests on the workloads being deterministic.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
import torch

from torchneuron.bench import zoo
from torchneuron.bench.metrics import max_abs_diff

ZOO_DIR = Path(zoo.__file__).parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


# gpt_nki's point is torchneuron's custom kernels: it may import those (and only those)
ALLOWED = {"gpt_nki.py": {"torchneuron.nki"}}


@pytest.mark.parametrize("path", sorted(ZOO_DIR.glob("*.py")), ids=lambda p: p.name)
def test_zoo_code_does_not_import_torchneuron(path: Path) -> None:
    allowed = ALLOWED.get(path.name, set())
    assert not [n for n in _imports(path) if n.split(".")[0] == "torchneuron"
                and n not in allowed]


def test_zoo_has_the_issue_workloads() -> None:
    kinds = {w.name: w.kind for w in zoo.ZOO.values()}
    assert kinds == {"mlp": "training", "cnn": "training", "gpt": "training",
                     "gru": "training", "decode": "inference", "encoder": "inference",
                     "hf_gpt2": "training", "gpt_wide": "training", "gpt_nki": "training"}
    with pytest.raises(KeyError, match="the zoo has: mlp"):
        zoo.get("resnet")


def _run(name: str, device: str, steps: int = 2) -> tuple[list, dict]:
    torch.manual_seed(0)
    task = zoo.get(name).build(device)
    torch.manual_seed(0)
    outs = []
    for i in range(steps):
        out = task.step(i)
        outs.append([o.cpu() for o in out] if isinstance(out, list) else out.cpu())
    return outs, {k: v.cpu() for k, v in task.state().items()}


# Seconds of CPU per step (its matmuls are computed at full size): checked below on a small
# configuration of the same code instead, and in the bench itself.
COSTLY = {"gpt_wide"}


def _params() -> list:
    out = []
    for name in (n for n in zoo.ZOO if n not in COSTLY):
        marks = []
        if name == "hf_gpt2" and importlib.util.find_spec("transformers") is None:
            marks.append(pytest.mark.skip(reason="transformers is not installed (extra 'hf')"))
        out.append(pytest.param(name, marks=marks))
    return out


@pytest.mark.parametrize("name", _params())
def test_workload_on_neuron_matches_cpu(name: str) -> None:
    cpu_out, cpu_state = _run(name, "cpu")
    dev_out, dev_state = _run(name, "neuron")
    assert max_abs_diff(dev_out, cpu_out) <= 1e-4
    assert max_abs_diff(dev_state, cpu_state) <= 1e-4
    first = cpu_out[0][0] if isinstance(cpu_out[0], list) else cpu_out[0]
    assert torch.isfinite(first.float()).all()


@pytest.mark.parametrize("autocast", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_wide_gpt_code_on_neuron_matches_cpu(autocast: torch.dtype | None) -> None:
    """gpt_wide's code at a small size, in float32 and under bf16 autocast (the CPU and
    the accelerator autocast lists cast the same ops in it): two AdamW steps, the same
    numbers on ``neuron`` as on CPU."""
    from torchneuron.bench.zoo.gpt_wide import WideGPT, lm_loss

    def run(device: str) -> tuple[list, dict]:
        torch.manual_seed(0)
        model = WideGPT(vocab=32, seq=8, d_model=32, heads=4, layers=2,
                        autocast=autocast).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(2):
            tokens = torch.randint(0, 32, (2, 9), generator=g).to(device)
            opt.zero_grad()
            loss = lm_loss(model(tokens[:, :-1]), tokens[:, 1:])
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        return losses, {k: v.cpu() for k, v in model.state_dict().items()}

    (cpu_out, cpu_state), (dev_out, dev_state) = run("cpu"), run("neuron")
    assert max_abs_diff(dev_out, cpu_out) <= 1e-5
    assert max_abs_diff(dev_state, cpu_state) <= 1e-5
    assert torch.isfinite(cpu_out[0])


def test_wide_gpt_matmul_keeps_tensore_busier_than_its_dispatch() -> None:
    """What makes gpt_wide device-bound, per the cost model: one of its d_model x d_model
    projections over a step's tokens keeps the device busy longer than the host spends
    dispatching and launching it."""
    from torchneuron import hardware
    from torchneuron.bench.zoo import gpt_wide

    x = torch.randn(gpt_wide.BATCH * gpt_wide.SEQ, gpt_wide.D_MODEL, device="neuron")
    w = torch.randn(gpt_wide.D_MODEL, gpt_wide.D_MODEL, device="neuron")
    core = hardware.get_core(0)
    x @ w  # first use: its eager kernel compiles
    torch.neuron.synchronize()
    before = core.stats()
    x @ w
    torch.neuron.synchronize()
    after = core.stats()
    busy = after["device_busy_ns"] - before["device_busy_ns"]
    host = sum(after["host_ns_by_category"].get(k, 0) - before["host_ns_by_category"].get(k, 0)
               for k in ("dispatch", "launch"))
    assert host > 0 and busy > host

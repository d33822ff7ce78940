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


@pytest.mark.parametrize("path", sorted(ZOO_DIR.glob("*.py")), ids=lambda p: p.name)
def test_zoo_code_does_not_import_torchneuron(path: Path) -> None:
    assert not [n for n in _imports(path) if n.split(".")[0] == "torchneuron"]


def test_zoo_has_the_issue_workloads() -> None:
    kinds = {w.name: w.kind for w in zoo.ZOO.values()}
    assert kinds == {"mlp": "training", "cnn": "training", "gpt": "training",
                     "gru": "training", "decode": "inference", "encoder": "inference",
                     "hf_gpt2": "training"}
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


def _params() -> list:
    out = []
    for name in zoo.ZOO:
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

"""ModuleInfo parity for CI: a representative subset of ``torch.nn`` modules, neuron vs CPU.

Why a subset: the full sweep (``python tools/moduleinfo_sweep.py``) runs every
module of PyTorch's ``module_db``; CI needs the families where a device breaks
first -- linear and bilinear layers, convolutions and transposed convolutions,
lazy modules (materialized on the device), normalization with running stats,
attention and transformer layers, pooling (including the random fractional
pool), padding modes, losses with class weights, index targets and length tensors
-- each in training mode: outputs, parameters and buffers after the forward, and
parameter and input gradients, using the sweep's own checker so the two cannot
drift apart.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import moduleinfo_sweep  # noqa: E402

from torchneuron.device.tensor import set_op_handler  # noqa: E402
from torchneuron.dispatch import eager  # noqa: E402

MODULES = [
    "nn.Linear", "nn.Bilinear", "nn.Conv2d", "nn.ConvTranspose1d", "nn.LazyConv2d",
    "nn.BatchNorm2d", "nn.GroupNorm", "nn.LayerNorm", "nn.RMSNorm", "nn.InstanceNorm1d",
    "nn.Embedding", "nn.MultiheadAttention", "nn.TransformerEncoderLayer",
    "nn.MaxPool2d", "nn.AdaptiveAvgPool2d", "nn.LPPool1d", "nn.FractionalMaxPool2d",
    "nn.ReflectionPad2d", "nn.CircularPad1d", "nn.PReLU", "nn.GLU", "nn.Softmax2d",
    "nn.CrossEntropyLoss", "nn.NLLLoss", "nn.CTCLoss", "nn.GaussianNLLLoss",
]  # fmt: skip
SAMPLES = 3  # spread over each module's sample list

_BY_NAME = {m.name: m for m in moduleinfo_sweep.find_modules(MODULES)}


@pytest.mark.parametrize("name", MODULES)
def test_module_matches_cpu(name: str) -> None:
    r = moduleinfo_sweep.check_module(_BY_NAME[name], "eager", samples=SAMPLES)
    assert r.status == "pass", f"{name}: {r.status}: {r.reason}"
    assert r.samples > 0


def _corrupting(target: Any) -> Any:
    """An op handler that runs ops normally but perturbs ``target``'s outputs."""

    def handle(func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        out = eager.run_op(func, args, kwargs)
        if func is target:
            outs = out if isinstance(out, (tuple, list)) else [out]
            outs[0].buffer.add_(1.0)
        return out

    return handle


@pytest.fixture
def restore_handler() -> Any:
    yield
    set_op_handler(lambda func, types, args, kwargs: eager.run_op(func, args, kwargs))


def test_checker_catches_wrong_outputs(restore_handler: None) -> None:
    set_op_handler(_corrupting(torch.ops.aten.addmm.default))
    r = moduleinfo_sweep.check_module(_BY_NAME["nn.Linear"], "eager", samples=1)
    assert r.status == "fail" and "output 0" in r.reason


def test_checker_catches_wrong_parameter_gradients(restore_handler: None) -> None:
    """A wrong weight gradient (forward intact) must fail the module."""
    set_op_handler(_corrupting(torch.ops.aten.native_layer_norm_backward.default))
    r = moduleinfo_sweep.check_module(_BY_NAME["nn.LayerNorm"], "eager", samples=1)
    assert r.status == "fail" and "grad of" in r.reason


def test_checker_catches_wrong_running_stats(restore_handler: None) -> None:
    """BatchNorm's running stats, updated in the forward, are compared as buffers."""

    def handle(func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        out = eager.run_op(func, args, kwargs)
        if func is torch.ops.aten.native_batch_norm.default:
            args[3].buffer.add_(1.0)  # running_mean, updated in place
        return out

    set_op_handler(handle)
    r = moduleinfo_sweep.check_module(_BY_NAME["nn.BatchNorm2d"], "eager", samples=1)
    assert r.status == "fail" and "buffer" in r.reason

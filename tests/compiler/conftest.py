"""Shared helpers: lower a python function to StableHLO text the way the compiler does."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from torchneuron.compiler.interpreter import interpret
from torchneuron.compiler.stablehlo import Module, parse_module


def lower_to_stablehlo(fn: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> str:
    """make_fx with core-aten + torch-mlir decompositions, then torch-mlir -> StableHLO."""
    import torch_mlir.fx as tmfx
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    decomp = {**core_aten_decompositions(), **tmfx.get_decomposition_table()}
    gm = make_fx(fn, decomposition_table=decomp)(*inputs)
    m = tmfx.stateless_fx_import(gm, output_type="stablehlo", model_name="main")
    return str(m.operation)


def run_via_json(text: str, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """parse -> to_dict -> JSON text -> from_dict -> interpret, as an executable would."""
    module = parse_module(text)
    loaded = Module.from_dict(json.loads(json.dumps(module.to_dict(), allow_nan=False)))
    assert loaded == module
    return interpret(loaded, list(inputs))


@pytest.fixture
def lower() -> Callable[[Callable[..., Any], Sequence[torch.Tensor]], str]:
    return lower_to_stablehlo


@pytest.fixture
def run_json() -> Callable[[str, Sequence[torch.Tensor]], list[torch.Tensor]]:
    return run_via_json

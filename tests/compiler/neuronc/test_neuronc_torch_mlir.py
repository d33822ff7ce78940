"""A real StableHLO module from torch-mlir (MLP forward + backward) compiles and fuses."""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler.neuronc import compile_module, format_program

torch_mlir_fx = pytest.importorskip("torch_mlir.fx", reason="torch-mlir is not installed")


def _mlp_fwd_bwd(x, w1, b1, w2):
    w1 = w1.detach().requires_grad_()
    w2 = w2.detach().requires_grad_()
    with torch.enable_grad():
        h = torch.sigmoid(x @ w1 + b1)
        loss = torch.tanh(h @ w2).sum()
        g1, g2 = torch.autograd.grad(loss, [w1, w2])
    return loss, g1, g2


def test_mlp_fwd_bwd_from_torch_mlir(trn2):
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchneuron.compiler.interpreter import interpret
    from torchneuron.compiler.stablehlo import parse_module

    args = [torch.randn(16, 32), torch.randn(32, 64), torch.randn(64), torch.randn(64, 8)]
    gm = make_fx(_mlp_fwd_bwd, decomposition_table=core_aten_decompositions())(*args)
    text = str(torch_mlir_fx.stateless_fx_import(gm, output_type="stablehlo"))
    module = parse_module(text)
    program = compile_module(module, trn2)
    cost = program.cost
    assert cost is not None
    assert 0 < cost.num_kernels < cost.num_ops
    assert cost.num_kernels < cost.eager_launches
    assert cost.hbm_read_bytes + cost.hbm_write_bytes < (
        cost.eager_hbm_read_bytes + cost.eager_hbm_write_bytes
    )
    # folding and DCE must not change what the program computes
    want = interpret(module, args)
    got = interpret(program.module, args)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w)
    assert "kernels" in format_program(program)

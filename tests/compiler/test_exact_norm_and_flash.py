"""``linalg_vector_norm`` and CPU's flash attention (forward and backward) compiled = eager's bits.

Why (issue 22): adaptive eager's regions hold the ops the device ran: gradient
clipping's per-parameter ``linalg_vector_norm`` (lowered, a sum of powers in another
order: an ulp off) and, since SDPA on the device calls the CPU's flash kernel as the CPU
does, ``_scaled_dot_product_flash_attention_for_cpu`` and its backward (spelled as math
attention: off in the last bits). Each is compiled as a call of eager's kernel
(``decomp/eager_kernels.py``); here each compiled graph must give eager's bits.
"""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401
from torchneuron.compiler import compile_graph

aten = torch.ops.aten


@pytest.mark.parametrize("ord", [2.0, 1.0, 3.0])
def test_vector_norm_compiled_bits(ord: float) -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 192)
    [got] = compile_graph(lambda t: aten.linalg_vector_norm(t, ord), [x]).run([x])
    assert torch.equal(got, aten.linalg_vector_norm(x, ord))


@pytest.mark.parametrize("masked", [False, True], ids=["causal", "float-mask"])
def test_flash_attention_compiled_bits(masked: bool) -> None:
    torch.manual_seed(0)
    q, k, v, go = (torch.randn(2, 4, 32, 16) for _ in range(4))
    mask = torch.randn(32, 32) if masked else None

    def fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, not masked, attn_mask=mask)

    def bwd(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(
            *a, 0.0, not masked, attn_mask=mask)

    want = fwd(q, k, v)
    got = compile_graph(fwd, [q, k, v]).run([q, k, v])
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    args = [go, q, k, v, *want]
    got_b = compile_graph(bwd, args).run(args)
    assert all(torch.equal(g, w) for g, w in zip(got_b, bwd(*args), strict=True))

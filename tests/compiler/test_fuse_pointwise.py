"""Fewer interpreter steps for pointwise arithmetic, with the op-by-op run's bits.

Why: an optimizer step lowers to many small elementwise ops (AdamW: ~14 per parameter
where eager runs 8 aten ops), each an interpreter step with its own Python around one
torch call. ``_simplify`` drops the exact identities (``x * 1``, ``x / 1``,
``x - (+0)``, ``x + (-0)``, the constant seen through converts and broadcasts);
``_fuse_pointwise`` runs a tree of single-use elementwise ops as one step, writing into
its own intermediates in place and calling ``torch.addcdiv`` for its pattern. Each
test compares against the same program run op by op (the passes switched off) bit for
bit, on values with NaN of both signs, infinities, signed zeros and subnormals, at
lengths with and without a vector tail, and against eager PyTorch where the program
comes from an optimizer.
"""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler.stablehlo import _simplify, parse_module, prepare

_SPECIALS = [float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0,
             1e-40, -1e-45, 3e38, 1.0, -1.0, 0.5]  # fmt: skip
_INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _data(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Random values over many magnitudes, a fifth of them special values."""
    n = 1
    for s in shape:
        n *= s
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    x = x * torch.exp(torch.randn(n, generator=gen, dtype=torch.float64) * 4)
    pick = torch.rand(n, generator=gen) < 0.2
    sp = torch.tensor(_SPECIALS, dtype=torch.float64)
    x[pick] = sp[torch.randint(0, len(_SPECIALS), (int(pick.sum()),), generator=gen)]
    return x.to(dtype).reshape(shape)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT_VIEW[t.element_size()])


def _same_bits(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(_bits(g), _bits(w)), (g, w)


_IDENTITIES = """func.func @main(%x: tensor<5xTY>) -> (tensor<5xTY>, tensor<5xTY>, tensor<5xTY>, tensor<5xTY>, tensor<5xTY>, tensor<5xTY>, tensor<5xTY>) {
  %one = arith.constant dense<1> : tensor<1xi64>
  %c1 = stablehlo.convert %one : (tensor<1xi64>) -> tensor<1xTY>
  %r1 = stablehlo.reshape %c1 : (tensor<1xTY>) -> tensor<TY>
  %b1 = stablehlo.broadcast_in_dim %r1, dims = [] : (tensor<TY>) -> tensor<5xTY>
  %pz = stablehlo.constant dense<0.000000e+00> : tensor<5xTY>
  %nz = stablehlo.constant dense<-0.000000e+00> : tensor<5xTY>
  %nzf = stablehlo.constant dense<-0.000000e+00> : tensor<f32>
  %nzi = stablehlo.convert %nzf : (tensor<f32>) -> tensor<i32>
  %nzp = stablehlo.convert %nzi : (tensor<i32>) -> tensor<TY>
  %bz = stablehlo.broadcast_in_dim %nzp, dims = [] : (tensor<TY>) -> tensor<5xTY>
  %0 = stablehlo.multiply %b1, %x : tensor<5xTY>
  %1 = stablehlo.divide %x, %b1 : tensor<5xTY>
  %2 = stablehlo.subtract %x, %pz : tensor<5xTY>
  %3 = stablehlo.add %nz, %x : tensor<5xTY>
  %4 = stablehlo.add %x, %pz : tensor<5xTY>
  %5 = stablehlo.subtract %x, %nz : tensor<5xTY>
  %6 = stablehlo.add %x, %bz : tensor<5xTY>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<5xTY>, tensor<5xTY>, tensor<5xTY>, tensor<5xTY>, tensor<5xTY>, tensor<5xTY>, tensor<5xTY>
}"""


@pytest.mark.parametrize("ty", ["f32", "f64", "f16", "bf16"])
def test_exact_identities_are_aliases(ty: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``1 * x``, ``x / 1``, ``x - (+0)``, ``(-0) + x`` are not run; ``x + (+0)``,
    ``x - (-0)`` and ``x + convert(convert(-0.0 to i32))`` (which is ``+0``) still are,
    and every result has the op-by-op run's bits (signed zeros, NaN, infinities)."""
    text = _IDENTITIES.replace("TY", ty)
    module = parse_module(text)
    prepared = prepare(module)
    dt = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
          "bf16": torch.bfloat16}[ty]  # fmt: skip
    x = torch.tensor([-0.0, 0.0, float("nan"), -float("inf"), 1e-40], dtype=dt)
    got = prepared.run([x])
    prepared.run([x])  # the kept-constants path
    block = prepared.block(module.functions[module.entry].body)
    # %4, %5, %6 (the MLIR parser renumbers the names)
    assert [s.op.name for s in block.hot] == ["stablehlo.add", "stablehlo.subtract",
                                              "stablehlo.add"]  # fmt: skip
    with monkeypatch.context() as m:
        m.setattr(_simplify, "_identity_operand", lambda op, operands, producer: None)
        plain = prepare(parse_module(text))
        want = plain.run([x])
        assert len(plain.block(plain.entry.body).hot) == 7
    _same_bits(got, want)
    assert all(g.data_ptr() != x.data_ptr() for g in got)  # aliased outputs: fresh tensors

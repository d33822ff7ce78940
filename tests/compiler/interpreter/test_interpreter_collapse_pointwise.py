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

import importlib
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torchneuron
import torchneuron.adaptive_eager as ae
from torchneuron.compiler.interpreter import _simplify, load
from torchneuron.compiler.interpreter.collapse import plugins
from torchneuron.compiler.stablehlo import parse_module

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
    prepared = load(module)
    dt = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
          "bf16": torch.bfloat16}[ty]  # fmt: skip
    x = torch.tensor([-0.0, 0.0, float("nan"), -float("nan"), 1e-40], dtype=dt)
    got = prepared.run([x])
    prepared.run([x])  # the kept-constants path
    block = prepared.block(module.functions[module.entry].body)
    if ty in ("f16", "bf16"):  # their ops rewrite a NaN's sign or payload: all run
        assert len(block.hot) == 7
    else:  # %4, %5, %6 (the MLIR parser renumbers the names)
        assert [s.op.name for s in block.hot] == ["stablehlo.add", "stablehlo.subtract",
                                                  "stablehlo.add"]  # fmt: skip
    with monkeypatch.context() as m:
        m.setattr(_simplify, "_identity_operand", lambda op, operands, producer: None)
        plain = load(parse_module(text))
        want = plain.run([x])
        assert len(plain.block(plain.entry.body).hot) == 7
    _same_bits(got, want)
    assert all(g.data_ptr() != x.data_ptr() for g in got)  # aliased outputs: fresh tensors


_TRANSPOSED_TREE = """func.func @main(%y: tensor<32x32xTY>, %x: tensor<32x32xTY>, %w: tensor<32x32xTY>) -> tensor<32x32xTY> {
  %xT = stablehlo.transpose %x, dims = [1, 0] : (tensor<32x32xTY>) -> tensor<32x32xTY>
  %wT = stablehlo.transpose %w, dims = [1, 0] : (tensor<32x32xTY>) -> tensor<32x32xTY>
  %0 = stablehlo.negate %xT : tensor<32x32xTY>
  %1 = stablehlo.subtract %y, %0 : tensor<32x32xTY>
  %2 = stablehlo.add %1, %wT : tensor<32x32xTY>
  return %2 : tensor<32x32xTY>
}"""


@pytest.mark.parametrize("ty", ["f32", "f64", "f16", "bf16"])
def test_tree_over_transposed_leaves_keeps_which_nan(ty: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree whose intermediate has a transposed layout: written in place, the next op
    would run torch's other loop, which in float16/bfloat16 keeps the other NaN of two
    (+NaN - x + (-NaN)). The fused step keeps the op-by-op bits in every dtype."""
    dt = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
          "bf16": torch.bfloat16}[ty]  # fmt: skip
    text = _TRANSPOSED_TREE.replace("TY", ty)
    inputs = [torch.full((32, 32), float("nan"), dtype=dt), torch.ones(32, 32, dtype=dt),
              torch.full((32, 32), -float("nan"), dtype=dt)]  # fmt: skip
    fused = load(parse_module(text))
    got = fused.run([t.clone() for t in inputs])
    assert [s.op.name for s in fused.block(fused.entry.body).hot] == [
        "torchneuron.collapsed.pointwise"]
    with monkeypatch.context() as m:
        _unfused(m)
        want = load(parse_module(text)).run([t.clone() for t in inputs])
    _same_bits(got, want)


_TREES = """func.func @main(%p: tensor<SxTY>, %g: tensor<SxTY>, %m: tensor<SxTY>, %v: tensor<SxTY>, %lr: tensor<TY>, %gt: tensor<TxTY>, %b: tensor<CxTY>, %f: tensor<NxTY>) -> (tensor<SxTY>, tensor<SxTY>, tensor<SxTY>, tensor<SxTY>) {
  %c1 = stablehlo.constant dense<1.000000e-01> : tensor<TY>
  %c2 = stablehlo.constant dense<9.990000e-01> : tensor<TY>
  %c3 = stablehlo.constant dense<1.000000e-03> : tensor<TY>
  %eps = stablehlo.constant dense<1.000000e-08> : tensor<TY>
  %b1 = stablehlo.broadcast_in_dim %c1, dims = [] : (tensor<TY>) -> tensor<SxTY>
  %b2 = stablehlo.broadcast_in_dim %c2, dims = [] : (tensor<TY>) -> tensor<SxTY>
  %b3 = stablehlo.broadcast_in_dim %c3, dims = [] : (tensor<TY>) -> tensor<SxTY>
  %be = stablehlo.broadcast_in_dim %eps, dims = [] : (tensor<TY>) -> tensor<SxTY>
  %blr = stablehlo.broadcast_in_dim %lr, dims = [] : (tensor<TY>) -> tensor<SxTY>
  %blr2 = stablehlo.broadcast_in_dim %lr, dims = [] : (tensor<TY>) -> tensor<SxTY>
  %blr3 = stablehlo.broadcast_in_dim %lr, dims = [] : (tensor<TY>) -> tensor<SxTY>
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<CxTY>) -> tensor<SxTY>
  %0 = stablehlo.subtract %g, %m : tensor<SxTY>
  %1 = stablehlo.multiply %0, %b1 : tensor<SxTY>
  %m2 = stablehlo.add %1, %m : tensor<SxTY>
  %3 = stablehlo.multiply %v, %b2 : tensor<SxTY>
  %4 = stablehlo.multiply %g, %b3 : tensor<SxTY>
  %5 = stablehlo.multiply %4, %g : tensor<SxTY>
  %v2 = stablehlo.add %3, %5 : tensor<SxTY>
  %7 = stablehlo.sqrt %v2 : tensor<SxTY>
  %8 = stablehlo.divide %7, %blr : tensor<SxTY>
  %9 = stablehlo.add %8, %be : tensor<SxTY>
  %10 = stablehlo.multiply %m2, %blr2 : tensor<SxTY>
  %11 = stablehlo.divide %10, %9 : tensor<SxTY>
  %p2 = stablehlo.add %p, %11 : tensor<SxTY>
  %gT = stablehlo.transpose %gt, dims = [1, 0] : (tensor<TxTY>) -> tensor<SxTY>
  %13 = stablehlo.multiply %g, %bb : tensor<SxTY>
  %14 = stablehlo.subtract %gT, %13 : tensor<SxTY>
  %15 = stablehlo.divide %p, %14 : tensor<SxTY>
  %16 = stablehlo.negate %15 : tensor<SxTY>
  %17 = stablehlo.abs %16 : tensor<SxTY>
  %19 = stablehlo.multiply %blr3, %m : tensor<SxTY>
  %20 = stablehlo.divide %19, %g : tensor<SxTY>
  %21 = stablehlo.add %17, %20 : tensor<SxTY>
  %fr = stablehlo.reshape %f : (tensor<NxTY>) -> tensor<SxTY>
  %22 = stablehlo.add %21, %fr : tensor<SxTY>
  return %m2, %v2, %p2, %22 : tensor<SxTY>, tensor<SxTY>, tensor<SxTY>, tensor<SxTY>
}"""

_DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
       "bf16": torch.bfloat16}  # fmt: skip
# lengths around the vector widths (AVX2 and AVX-512: 8 and 16 floats, 4 and 8 doubles,
# kernels unrolled twice), with and without a scalar tail, and one split across threads
_SHAPES = [(1, 1), (1, 3), (1, 7), (1, 8), (1, 9), (2, 8), (3, 5), (1, 16), (1, 17),
           (2, 33), (4, 65), (33, 130), (2, 20011)]  # fmt: skip


def _trees(ty: str, rows: int, cols: int) -> str:
    return (_TREES.replace("tensor<SxTY>", f"tensor<{rows}x{cols}x{ty}>")
            .replace("tensor<TxTY>", f"tensor<{cols}x{rows}x{ty}>")
            .replace("tensor<CxTY>", f"tensor<{cols}x{ty}>")
            .replace("tensor<NxTY>", f"tensor<{rows * cols}x{ty}>").replace("TY", ty))  # fmt: skip


def _unfused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch the pointwise passes off (for the op-by-op reference run)."""
    monkeypatch.setattr(plugins, "LATE", ())
    monkeypatch.setattr(_simplify, "_identity_operand", lambda op, operands, producer: None)


@pytest.mark.parametrize("ty", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_trees_give_the_op_by_op_bits(ty: str, shape: tuple[int, int],
                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """AdamW's lerp, addcmul and addcdiv forms, right-hand in-place operands (``x - r``,
    ``x / r``), a broadcast row, transposed (strided) and reshaped leaves, ``v * t`` and
    ``t * v``: one
    step per tree, and every result bit for bit the op-by-op run's, for a NaN, ``-0``
    and ordinary step size."""
    rows, cols = shape
    text = _trees(ty, rows, cols)
    dt = _DT[ty]
    gen = torch.Generator().manual_seed(rows * 1000 + cols)
    inputs = []
    for lr in (0.3, float("nan"), -0.0, 1e-3):
        args = [_data(shape, dt, gen) for _ in range(4)]
        args += [torch.tensor(lr, dtype=dt), _data((cols, rows), dt, gen), _data((cols,), dt, gen),
                 _data((rows * cols,), dt, gen)]
        inputs.append(args)
    fused = load(parse_module(text))
    kept = [[a.clone() for a in args] for args in inputs]
    got = [fused.run(a) for a in inputs]
    for args, copies in zip(inputs, kept, strict=True):  # in place only on its own values
        _same_bits(args, copies)
    hot = fused.block(fused.entry.body).hot
    with monkeypatch.context() as m:
        _unfused(m)
        plain = load(parse_module(text))
        want = [plain.run(a) for a in inputs]
        plain_hot = plain.block(plain.entry.body).hot
    for g, w in zip(got, want, strict=True):
        _same_bits(g, w)
    # four trees (the transpose and reshape read inside), from 24 steps (the broadcasts:
    # kept or absorbed)
    assert len(plain_hot) == 24 and len(hot) == 4, [s.op.name for s in hot]
    uses_addcdiv = ty in ("f32", "f64")
    names = [n for s in hot if hasattr(s.op, "impl") for n in s.op.impl.__code__.co_names]
    assert uses_addcdiv == ("_addcdiv" in names), names


def _optimizer_loop(make_opt: Any, fused: bool, monkeypatch: pytest.MonkeyPatch,
                    device: str = "neuron") -> tuple[dict[str, torch.Tensor], int]:  # fmt: skip
    """An MLP trained 8 steps under adaptive eager (the optimizer step replays as a
    compiled region): its losses, parameters and optimizer state, and the number of
    steps the prepared blocks run per replay (``_Block.hot``, summed)."""
    interp = importlib.import_module("torchneuron.compiler.interpreter.interpret")
    blocks: dict[int, Any] = {}
    with monkeypatch.context() as m:
        if not fused:
            _unfused(m)
        original = interp.Loaded.block

        def block(self: Any, ops: Any) -> Any:
            b = original(self, ops)
            blocks[id(b)] = b
            return b

        m.setattr(interp.Loaded, "block", block)
        ae.disable()
        torchneuron.reset()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)).to(device)  # fmt: skip
        opt = make_opt(model.parameters())
        gen = torch.Generator().manual_seed(1)
        if device == "neuron":
            ae.enable()
        losses = []
        try:
            for _ in range(8):
                x = torch.randn(8, 16, generator=gen).to(device)
                y = torch.randn(8, 4, generator=gen).to(device)
                loss = F.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
            replays = ae.stats()["replays"]
        finally:
            ae.disable()
            ae.reset()
    assert device != "neuron" or replays >= 3
    out = {"losses": torch.tensor(losses)}
    out.update({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
    for i, p in enumerate(model.parameters()):
        for k, v in opt.state[p].items():
            if isinstance(v, torch.Tensor) and v.dim():
                out[f"{i}.{k}"] = v.detach().cpu().clone()
    return out, sum(len(b.hot) for b in blocks.values())


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    lambda ps: torch.optim.Adam(ps, lr=1e-2),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
], ids=["adamw", "adam", "sgd_nesterov"])  # fmt: skip
def test_optimizer_steps_equal_unfused_and_eager(make_opt: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole training steps: the fused programs give the unfused programs' bits, eager
    CPU PyTorch's numbers (to rounding: the lowering spells ``addcmul_`` and ``lerp_``
    without the CPU kernels' fused multiply-add), and run fewer steps."""
    fused, fused_hot = _optimizer_loop(make_opt, True, monkeypatch)
    plain, plain_hot = _optimizer_loop(make_opt, False, monkeypatch)
    cpu, _ = _optimizer_loop(make_opt, True, monkeypatch, device="cpu")
    assert fused.keys() == plain.keys() == cpu.keys()
    for k in fused:
        assert torch.equal(_bits(fused[k]), _bits(plain[k])), k
        torch.testing.assert_close(fused[k], cpu[k], rtol=1e-5, atol=1e-6, msg=k)
    assert fused_hot < plain_hot, (fused_hot, plain_hot)


_SELECT = """func.func @main(%m: tensor<3x1x1x1xi1>, %r: tensor<3x16x8x32xi1>, %x: tensor<1x16x8x32xTY>, %z: tensor<3x16x8x32xTY>) -> (tensor<3x16x8x32xTY>, tensor<3x16x8x32xTY>) {
  %mb = stablehlo.broadcast_in_dim %m, dims = [0, 1, 2, 3] : (tensor<3x1x1x1xi1>) -> tensor<3x16x8x32xi1>
  %xb = stablehlo.broadcast_in_dim %x, dims = [0, 1, 2, 3] : (tensor<1x16x8x32xTY>) -> tensor<3x16x8x32xTY>
  %0 = stablehlo.select %mb, %xb, %z : tensor<3x16x8x32xi1>, tensor<3x16x8x32xTY>
  %1 = stablehlo.select %r, %xb, %z : tensor<3x16x8x32xi1>, tensor<3x16x8x32xTY>
  return %0, %1 : tensor<3x16x8x32xTY>, tensor<3x16x8x32xTY>
}"""


@pytest.mark.parametrize("ty", ["f32", "f64", "f16", "bf16"])
def test_select_with_a_broadcast_mask_keeps_where_bits(ty: str) -> None:
    """A mask broadcast along its inner dims (attention's stack backward) runs as
    ``where``, a random one in the bit form: both give ``where``'s bits (NaN payloads,
    signed zeros)."""
    dt = _DT[ty]
    gen = torch.Generator().manual_seed(7)
    m = torch.tensor([True, False, True]).reshape(3, 1, 1, 1)
    r = torch.rand(3, 16, 8, 32, generator=gen) < 0.5
    x, z = _data((1, 16, 8, 32), dt, gen), _data((3, 16, 8, 32), dt, gen)
    got = load(parse_module(_SELECT.replace("TY", ty))).run([m, r, x, z])
    want = [torch.where(m.expand(3, 16, 8, 32), x.expand(3, 16, 8, 32), z),
            torch.where(r, x.expand(3, 16, 8, 32), z)]  # fmt: skip
    _same_bits(got, want)


@pytest.mark.parametrize("ty", ["f32", "f64", "f16", "bf16", "i32", "i64", "ui8"])
@pytest.mark.parametrize("n", [1, 7, 16, 17, 97, 4099])
def test_convert_to_bool_is_x_not_equal_zero(ty: str, n: int) -> None:
    """The specialized ``convert`` to ``i1`` (a cast) gives ``x != 0`` on every value:
    NaN of both signs true, ``-0`` and ``+0`` false, subnormals true."""
    text = f"""func.func @main(%x: tensor<{n}x{ty}>) -> tensor<{n}xi1> {{
  %0 = stablehlo.convert %x : (tensor<{n}x{ty}>) -> tensor<{n}xi1>
  return %0 : tensor<{n}xi1>
}}"""
    gen = torch.Generator().manual_seed(n)
    if ty in _DT:
        x = _data((n,), _DT[ty], gen)
    else:
        dt = {"i32": torch.int32, "i64": torch.int64, "ui8": torch.uint8}[ty]
        x = torch.randint(0, 3, (n,), generator=gen).to(dt) * (1 if ty == "ui8" else -1)
    (got,) = load(parse_module(text)).run([x])
    assert torch.equal(got, x != 0)

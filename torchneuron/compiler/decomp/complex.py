"""Complex values as real pairs, for a device (and a Torch-MLIR) without complex dtypes.

A complex tensor is carried in the ``view_as_real`` layout: one real tensor with a
trailing dim of 2 (re, im). Why this layout and not separate re/im tensors: it is the
layout of a complex tensor's own memory, so the executable's boundary is a free view
(``view_as_real`` in, ``view_as_complex`` out, see prepare.py and executable.py); each
complex value stays one FX node, so a decomposition can return a complex tensor
(``view_as_complex(pairs)``) and the next op reads it back (``view_as_real``), and
``fold_complex_pairs`` removes every such round trip after tracing. (FFTs, which these
entries first served, are refused: decomp/fft.py.)

Each entry rewrites an op only when it sees complex values (NotImplemented otherwise,
and ``decomp.fft.fft_decompositions`` hands real values to the table's earlier entry).
Only simple complex arithmetic is handled: conj, real/imag, complex, abs, sgn,
add/sub, multiplication and division by a real value (a product of two complex
values depends on the CPU: ``_refuse_complex_product``), casts, ops that move whole elements (slice,
select, pad, permute, view, cat, flip, index_select for fftshift/roll, ...), where. Any other op on
complex values stays in the graph, and ``refuse_complex`` refuses the graph with a
typed ``PrepareError`` naming it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.decomp.host_numerics import premise_holds, register_premise, sample
from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["COMPLEX_DECOMPOSITIONS", "fold_complex_pairs", "refuse_complex", "pairs",
           "from_pairs", "REAL_OF", "in_eager_layout"]

aten = torch.ops.aten
prims = torch.ops.prims
COMPLEX_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
# the complex layer's own owners (its entries wrap the families' for real values)
COMPLEX_OWNERS: dict[Any, str] = {}
_register = registrar(COMPLEX_DECOMPOSITIONS, filed=COMPLEX_OWNERS)


REAL_OF = {torch.complex32: torch.float16, torch.complex64: torch.float32,
            torch.complex128: torch.float64}


def pairs(z: torch.Tensor) -> torch.Tensor:
    """A complex tensor as (..., 2) real pairs; a real one gets zero imaginary parts."""
    if z.is_complex():
        return torch.view_as_real(z)
    return torch.stack([z, torch.zeros_like(z)], dim=-1)


def from_pairs(p: torch.Tensor) -> torch.Tensor:
    return torch.view_as_complex(p)



# --------------------------------------------------------------------------- eager's layout
# A decomposition builds its result from stacks, matmuls and movedims, whose strides are
# not the ones eager's kernel gives (``fft2(z, dim=(-1, -2))``: (1, 4) where eager has
# (10, 1)). The traced graph would then differ from eager wherever strides matter: a
# ``.view(-1)`` that eager allows fails, the executable returns outputs with other
# strides (and twice the storage for a real part taken from pairs). So each result is
# laid out as eager's (a permuted contiguous copy, only where it differs).

# decompositions that return a view of their input's pairs: strides follow the input's
_PAIR_VIEWS = {aten.slice.Tensor, aten.select.int, aten.permute.default, aten.view.default,
               aten.unsqueeze.default, aten.expand.default, aten.alias.default,
               aten.real.default, aten.imag.default}


def in_eager_layout(op: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` (a decomposition of ``op``) with eager's strides.

    Eager's strides come from ``op`` run on meta tensors of the same layout. A
    decomposition that fails returns NotImplemented: the op then stays in the graph and
    ``refuse_complex`` refuses it with a typed error, also under AOTAutograd, where a
    raised error would fail torch.compile instead of running eagerly."""
    try:
        r = fn(*args, **kwargs)
    except Exception:
        return NotImplemented
    if not isinstance(r, torch.Tensor) or op in _PAIR_VIEWS:
        return r
    want = _eager_strides(op, args, kwargs)
    if want is None or tuple(r.stride()) == want or len(want) != r.dim():
        return r
    if r.is_complex():
        p = _restrided(pairs(r), (*(2 * s for s in want), 1))
        return r if p is None else from_pairs(p)
    p = _restrided(r, want)
    return r if p is None else p


def _eager_strides(op: Any, args: Any, kwargs: Any) -> tuple[int, ...] | None:
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    def like(t: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                   device="meta")

    try:
        with disable_proxy_modes_tracing(), unset_fake_temporarily():
            a, k = pytree.tree_map_only(torch.Tensor, like, (args, kwargs))
            out = op(*a, **k)
    except Exception:
        return None
    return tuple(out.stride()) if isinstance(out, torch.Tensor) else None


def _restrided(t: torch.Tensor, want: tuple[int, ...]) -> torch.Tensor | None:
    """``t`` copied into the dense layout with strides ``want`` (dims ordered by
    decreasing stride, a size-1 dim after the others of its stride), or None when
    ``want`` is not a dense layout of ``t``'s shape."""
    nd = t.dim()
    order = sorted(range(nd), key=lambda d: (-want[d], t.shape[d] == 1, d))
    dense, step = [0] * nd, 1
    for d in reversed(order):
        dense[d] = step
        step *= t.shape[d]
    if any(dense[d] != want[d] for d in range(nd) if t.shape[d] != 1):
        return None
    inverse = [order.index(d) for d in range(nd)]
    return t.permute(order).contiguous().permute(inverse)


# --------------------------------------------------------------------------- complex values


@_register(aten._conj.default, aten.conj_physical.default, aten._conj_physical.default)
def conj(z: torch.Tensor) -> Any:
    if not z.is_complex():
        return NotImplemented
    p = pairs(z)
    return from_pairs(torch.stack([p[..., 0], -p[..., 1]], dim=-1))


@_register(aten.real.default)
def real(z: torch.Tensor) -> Any:
    return pairs(z)[..., 0] if z.is_complex() else NotImplemented


@_register(aten.imag.default)
def imag(z: torch.Tensor) -> Any:
    return pairs(z)[..., 1] if z.is_complex() else NotImplemented


@_register(aten.complex.default)
def complex_(re: torch.Tensor, im: torch.Tensor) -> Any:
    re, im = torch.broadcast_tensors(re, im)
    return from_pairs(torch.stack([re, im], dim=-1))


@_register(aten.abs.default)
def abs_(z: torch.Tensor) -> Any:
    if not z.is_complex():
        return NotImplemented
    if z.dtype == torch.complex128 or not _hypot_premise():
        return _refuse_complex128_abs("aten.abs")
    return _hypot(pairs(z))


def _refuse_complex128_abs(op: str) -> Any:
    """complex128 ``abs`` / ``sgn`` are not lowered: eager's vectorised loop and its
    scalar tail round |z| differently (about one value in 400), so eager's bits depend
    on where an element sits. NotImplemented leaves the op in the graph, and
    ``refuse_complex`` refuses it (``complex-op``); the region runs eagerly."""
    del op
    return NotImplemented


def _hypot_premise() -> bool:
    """Whether this CPU's eager complex64 |z| is the correctly rounded hypot ``_hypot``
    computes (its vectorised loop's; ``host_numerics``, on one sample): where it is
    not (``ATEN_CPU_CAPABILITY=default``), abs and sgn are refused as complex128's are."""
    return premise_holds("aten.abs", torch.complex64)


def _abs_sample() -> torch.Tensor:
    """Normal values, and the extremes where the two loops part: values whose squares
    overflow or underflow float32, infinities, NaN, signed zeros."""
    re, im = sample((4000,), 0, 10.0), sample((4000,), 1)
    inf, nan = float("inf"), float("nan")
    re[:6] = torch.tensor([3e20, 3e-40, inf, nan, 0.0, -0.0], dtype=torch.float64)
    im[:6] = torch.tensor([4e20, 4e-40, nan, 1.0, -0.0, 0.0], dtype=torch.float64)
    return torch.complex(re, im).to(torch.complex64)


def _eager_abs_sgn() -> tuple[torch.Tensor, torch.Tensor]:
    z = _abs_sample()
    return z.abs(), torch.view_as_real(z.sgn())


def _our_abs_sgn() -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.view_as_real(_abs_sample())
    r = _hypot(p)
    return r, torch.where(r.unsqueeze(-1) == 0, torch.zeros_like(p), p / r.unsqueeze(-1))


def _hypot(p: torch.Tensor) -> torch.Tensor:
    """|re + i im| of complex64 pairs as eager's ``std::abs`` (a correctly rounded
    hypot): the exact squares summed and square-rooted in float64, rounded once to
    float32, so it neither overflows (3e20 + 4e20j) nor underflows (3e-40 + 4e-40j); inf
    when either part is infinite (even with a NaN other part)."""
    a, b = p[..., 0].abs().double(), p[..., 1].abs().double()
    r = torch.sqrt(a * a + b * b)
    inf = float("inf")
    return torch.where((a == inf) | (b == inf), inf, r).to(p.dtype)


@_register(aten.clone.default)
def clone(z: torch.Tensor, *, memory_format: Any = None) -> Any:
    """``memory_format`` as eager: contiguous (``.contiguous()``, ``reshape`` of a
    transposed value) or preserved, the pair dim last in both; another format
    (channels_last) is a copy that ``in_eager_layout`` lays out as eager's."""
    if not z.is_complex():
        return NotImplemented
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        memory_format = None
    return from_pairs(pairs(z).clone(memory_format=memory_format or torch.preserve_format))


@_register(prims.convert_element_type.default)
def convert_element_type(x: torch.Tensor, dtype: torch.dtype) -> Any:
    """Real to complex (as ``irfft`` of a real input does): zero imaginary parts;
    complex to complex: both parts cast; complex to real: the real part (eager's)."""
    if x.is_complex() and dtype.is_complex:
        return from_pairs(pairs(x).to(REAL_OF[dtype]))
    if x.is_complex():
        return pairs(x)[..., 0].to(dtype)
    if not dtype.is_complex:
        return NotImplemented
    return from_pairs(pairs(x.to(REAL_OF[dtype])))


def _operand(v: Any, real_dtype: torch.dtype) -> tuple[Any, Any]:
    """(re, im) of a tensor or python number operand, tensors in ``real_dtype`` (the
    result's, after type promotion); im None when the operand is real."""
    if isinstance(v, torch.Tensor):
        if v.is_complex():
            p = pairs(v).to(real_dtype)
            return p[..., 0], p[..., 1]
        return v.to(real_dtype), None
    if isinstance(v, complex):
        return _rounded(v.real, real_dtype), _rounded(v.imag, real_dtype)
    return _rounded(v, real_dtype), None


def _rounded(v: Any, real_dtype: torch.dtype) -> Any:
    """A python number as eager's kernel sees it, cast to the result's precision first
    (``z + 1e39`` in complex64 adds inf)."""
    import numpy as np

    kind = {torch.float16: np.float16, torch.float32: np.float32}.get(real_dtype)
    if kind is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    with np.errstate(over="ignore"):
        return float(kind(v))


def _complex_binary(kind: str) -> Callable[..., Any]:
    def fn(a: Any, b: Any, *, alpha: Any = None) -> Any:
        if not any(isinstance(v, torch.Tensor) and v.is_complex() for v in (a, b)):
            return NotImplemented
        out_dtype = torch.result_type(a, b)
        if not out_dtype.is_complex:
            return NotImplemented
        if alpha is not None and alpha != 1 and kind not in ("add", "sub"):
            return NotImplemented
        real_dtype = REAL_OF[out_dtype]
        ar, ai = _operand(a, real_dtype)
        br, bi = _operand(b, real_dtype)
        if kind in ("add", "sub"):
            # eager: a + alpha * b, alpha (also 1, -1 for sub) a complex number multiplied
            # in fully, so b's 0 * inf terms count: (1 + 1j) + (inf + 1j) is inf + nan j
            av = complex(1 if alpha is None else alpha) * (1 if kind == "add" else -1)
            bi = 0.0 if bi is None else bi
            b_re, b_im = av.real * br - av.imag * bi, av.real * bi + av.imag * br
            re = ar + b_re
            im = (ai if ai is not None else 0) + b_im
            if not isinstance(re, torch.Tensor):
                re = torch.zeros_like(im) + re
            if not isinstance(im, torch.Tensor):
                im = torch.zeros_like(re) + im
        elif kind == "mul":  # a real operand promoted to x + 0j, as eager: 0 * inf terms
            if ai is not None and bi is not None:
                return _refuse_complex_product()
            ai = 0.0 if ai is None else ai  # (2 * (1 + inf j) is nan + inf j)
            bi = 0.0 if bi is None else bi
            re, im = ar * br - ai * bi, ar * bi + ai * br
        else:  # div by a real value only (a complex divisor needs eager's scaling)
            if bi is not None:
                return NotImplemented
            re, im = _div_by_real(ar, ai, br)
        re, im = torch.broadcast_tensors(re, im)
        return from_pairs(torch.stack([re, im], dim=-1))

    return fn


def _refuse_complex_product() -> Any:
    """A product of two complex values is not lowered: eager's ``ac - bd`` and ``ad + bc``
    are two roundings each in its vector loop and one fused multiply-add in the scalar
    loop of its AVX2 and AVX-512 builds (not in the default one), so eager's bits depend
    on the CPU and on where an element sits (the exact sweep: complex64 ``z * w`` of 5
    elements by a 0-d ``w``, one ulp off in one element on AVX-512 and AVX2, equal at
    ``ATEN_CPU_CAPABILITY=default``). NotImplemented leaves the op in the graph, and
    ``refuse_complex`` refuses it (``complex-op``). A real operand times a complex one
    is lowered: its products with the zero imaginary part are exact, fused or not."""
    return NotImplemented


def _div_by_real(a: Any, b: Any, c: Any) -> tuple[Any, Any]:
    """(a + b i) / (c + 0 i) as eager's complex division (c10's, numpy's): with d = 0,
    rat = d / c, re = (a + b * rat) * (1 / c), im = (b - a * rat) * (1 / c) (nan where the
    other part is infinite: (1 + inf j) / 2 is nan + inf j), and for c == 0, a / |c| and
    b / |d| (both +0), not the ratio's NaN."""
    if not isinstance(c, torch.Tensor):
        like = a if isinstance(a, torch.Tensor) else b
        # torch.full, not torch.tensor: AOTAutograd's trace refuses the latter's detach_
        c = torch.full((), c, dtype=like.dtype, device=like.device)
    rat = torch.zeros_like(c) / c  # (not 0.0 / c: that is 0 * (1 / c), nan at 1e-40)
    scale = 1.0 / c  # multiplied, as eager: 0 / 1e-40 is 0 * inf = nan there
    re, im = (a + b * rat) * scale, (b - a * rat) * scale
    zero = c == 0
    return torch.where(zero, a / c.abs(), re), torch.where(zero, b / c.abs(), im)


for _kind, _ops in (("add", (aten.add.Tensor, aten.add.Scalar)),
                    ("sub", (aten.sub.Tensor, aten.sub.Scalar)),
                    ("mul", (aten.mul.Tensor, aten.mul.Scalar)),
                    ("div", (aten.div.Tensor, aten.div.Scalar))):
    _register(*_ops)(_complex_binary(_kind))


# --------------------------------------------------------------------------- after tracing


def fold_complex_pairs(gm: fx.GraphModule) -> None:
    """Remove every ``view_as_real(view_as_complex(p))`` round trip the decompositions
    left (it is ``p``)."""
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is aten.view_as_real.default:
            src = node.args[0]
            if isinstance(src, fx.Node) and src.target is aten.view_as_complex.default:
                node.replace_all_uses_with(src.args[0])
                gm.graph.erase_node(node)
                if not src.users:
                    gm.graph.erase_node(src)


def refuse_complex(gm: fx.GraphModule) -> None:
    """Refuse the graph if it still computes a complex value (after dead code and empty
    tensors are gone): an op on complex values that no decomposition here handles. The
    device has no complex dtype, and what Torch-MLIR would make of it is unchecked."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "call_function" and isinstance(val, torch.Tensor) and val.is_complex():
            # name the op that needed the complex value, not the pairs' view
            culprit = node if node.target is not aten.view_as_complex.default or not node.users \
                else next(iter(node.users))
            raise PrepareError(
                f"{culprit.target} computes with complex values, which the compiler carries "
                "as real pairs only through FFTs and simple complex arithmetic; the graph "
                "runs eagerly, with eager's results.",
                op=str(culprit.target), reason="complex-op")


# No entry for ``polar``: eager's r * cos(theta), r * sin(theta) take its own sin and cos
# (SLEEF's or libm's), which the lowered ones are not (3 of 10 elements off in the last
# bits, ``tools/lowering_coverage.py --exact``): it stays complex and is refused.


# --------------------------------------------------------------------------- layout ops
# Ops that move or pick whole elements act on the pairs the same way, with the pair dim
# kept last: dims are counted in the complex tensor, the pair dim is appended.


def _d(dim: int, nd: int) -> int:
    return dim % nd if nd else 0


def _on_pairs(op: Any, z: Any, *args: Any) -> Any:
    return from_pairs(op(pairs(z), *args))


def _is_c(z: Any) -> bool:
    return isinstance(z, torch.Tensor) and z.is_complex()


@_register(aten.slice.Tensor)
def slice_(z: torch.Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    if not _is_c(z):
        return NotImplemented
    return _on_pairs(aten.slice.Tensor, z, _d(dim, z.dim()), start, end, step)


@_register(aten.select.int)
def select(z: torch.Tensor, dim: int, index: int) -> Any:
    if not _is_c(z):
        return NotImplemented
    return _on_pairs(aten.select.int, z, _d(dim, z.dim()), index)


@_register(aten.constant_pad_nd.default)
def constant_pad_nd(z: torch.Tensor, pad: Sequence[int], value: Any = 0) -> Any:
    if not _is_c(z) or value != 0:
        return NotImplemented
    return _on_pairs(aten.constant_pad_nd.default, z, [0, 0, *pad], 0)


@_register(aten.permute.default)
def permute(z: torch.Tensor, dims: Sequence[int]) -> Any:
    if not _is_c(z):
        return NotImplemented
    return _on_pairs(aten.permute.default, z, [*(_d(d, z.dim()) for d in dims), z.dim()])


@_register(aten.view.default)
def view(z: torch.Tensor, size: Sequence[int]) -> Any:
    if not _is_c(z):
        return NotImplemented
    return _on_pairs(aten.view.default, z, [*size, 2])


@_register(aten.unsqueeze.default)
def unsqueeze(z: torch.Tensor, dim: int) -> Any:
    if not _is_c(z):
        return NotImplemented
    return _on_pairs(aten.unsqueeze.default, z, _d(dim, z.dim() + 1))


@_register(aten.expand.default)
def expand(z: torch.Tensor, size: Sequence[int], *, implicit: bool = False) -> Any:
    if not _is_c(z):
        return NotImplemented
    return _on_pairs(aten.expand.default, z, [*size, 2])


@_register(aten.flip.default)
def flip(z: torch.Tensor, dims: Sequence[int]) -> Any:
    if not _is_c(z):
        return NotImplemented
    return _on_pairs(aten.flip.default, z, [_d(d, z.dim()) for d in dims])


@_register(aten.alias.default)
def alias(z: torch.Tensor) -> Any:
    return _on_pairs(aten.alias.default, z) if _is_c(z) else NotImplemented


@_register(aten.cat.default)
def cat(tensors: Sequence[torch.Tensor], dim: int = 0) -> Any:
    if not any(_is_c(t) for t in tensors):
        return NotImplemented
    real_dtype = REAL_OF.get(functools.reduce(torch.promote_types, [t.dtype for t in tensors]))
    full = [t for t in tensors if t.dim() != 1 or t.shape[0] != 0]  # legacy empty skipped
    if real_dtype is None or not full:
        return NotImplemented
    nd = full[0].dim()
    return from_pairs(aten.cat.default([pairs(t).to(real_dtype) for t in full], _d(dim, nd)))


@_register(aten.slice_scatter.default)
def slice_scatter(z: torch.Tensor, src: torch.Tensor, dim: int = 0, start: Any = None,
                  end: Any = None, step: int = 1) -> Any:
    if not _is_c(z):
        return NotImplemented
    p = pairs(z)
    return from_pairs(aten.slice_scatter.default(p, pairs(src).to(p.dtype), _d(dim, z.dim()),
                                               start, end, step))


@_register(aten.copy.default)
def copy(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> Any:
    if not _is_c(dst):
        return NotImplemented
    p = pairs(dst)
    return from_pairs(aten.copy.default(p, pairs(src).to(p.dtype)))


# --------------------------------------------------------------------------- autograd
# What the backward of ``rfft(x).abs()`` needs: sgn, and zeros of a complex dtype.


@_register(aten.sgn.default)
def sgn(z: torch.Tensor) -> Any:
    """z / |z|, and 0 where z is 0 (eager's complex sgn)."""
    if not _is_c(z):
        return NotImplemented
    if z.dtype == torch.complex128 or not _hypot_premise():
        return _refuse_complex128_abs("aten.sgn")
    p = pairs(z)
    r = _hypot(p).unsqueeze(-1)
    return from_pairs(torch.where(r == 0, torch.zeros_like(p), p / r))


@_register(aten.new_zeros.default)
def new_zeros(z: torch.Tensor, size: Sequence[int], *, dtype: Any = None, layout: Any = None,
              device: Any = None, pin_memory: Any = None) -> Any:
    dtype = dtype if dtype is not None else z.dtype
    if not dtype.is_complex:
        return NotImplemented
    return from_pairs(torch.zeros([*size, 2], dtype=REAL_OF[dtype], device=z.device))


@_register(aten.index_select.default)
def index_select(z: torch.Tensor, dim: int, index: torch.Tensor) -> Any:
    """(fftshift and roll gather whole elements)"""
    if not _is_c(z):
        return NotImplemented
    return _on_pairs(aten.index_select.default, z, _d(dim, z.dim()), index)


@_register(aten.neg.default)
def neg(z: torch.Tensor) -> Any:
    return _on_pairs(aten.neg.default, z) if _is_c(z) else NotImplemented


# No entry for ``sum`` / ``mean`` of complex values: eager sums complex<float> in the
# order of its own vector loop, which the pairs' reduction does not reproduce (a sum of
# 24 complex64 values was off in the last bit): they stay complex and are refused.


@_register(aten.where.self)
def where(cond: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> Any:
    if not (_is_c(a) or _is_c(b)):
        return NotImplemented
    real_dtype = REAL_OF.get(torch.result_type(a, b))
    if real_dtype is None:
        return NotImplemented
    pa, pb = pairs(a).to(real_dtype), pairs(b).to(real_dtype)
    return from_pairs(aten.where.self(cond.unsqueeze(-1), pa, pb))


@_register(aten.scalar_tensor.default)
def scalar_tensor(value: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> Any:
    if dtype is None or not dtype.is_complex:
        return NotImplemented
    v = complex(value)
    parts = [aten.scalar_tensor.default(part, dtype=REAL_OF[dtype], device=device)
             for part in (v.real, v.imag)]
    return from_pairs(torch.stack(parts))


register_premise("aten.abs", torch.complex64, _eager_abs_sgn, _our_abs_sgn)

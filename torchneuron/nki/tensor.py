"""``NkiTensor``: a tensor in HBM or a tile in SBUF / PSUM, holding its values on the CPU.

Why values at once: kernels run at trace time as plain Python (as in NKI 0.7), so each
instruction computes its result immediately; the interpreter is the language itself.

A tile's first dimension is its partition dimension. Indexing gives a view that shares
its storage (``alloc``), so the schedule sees a read or write of a slice as one of the
whole tile (conservative: never too optimistic). Index arrays (``nl.arange``) select
elements as advanced indexing does; writing through such a view writes the selected
elements back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._context import Allocation, current

__all__ = ["NkiTensor", "tile_values"]


# ``nki.language``, which registers itself here when imported (it imports this module, so
# this module cannot import it): the tensor's operators are the language's elementwise ops.
_LANGUAGE: list[Any] = []


def _language() -> Any:
    return _LANGUAGE[0]


class NkiTensor:
    """A tensor of the kernel. ``buffer``: "hbm", "sbuf" or "psum"."""

    __slots__ = ("data", "buffer", "alloc", "_base", "_parent", "_index", "producer",
                 "__weakref__")
    __array_priority__ = 1000  # numpy index arrays on the left defer to our operators

    def __init__(self, data: torch.Tensor, buffer: str, alloc: Allocation,
                 base: NkiTensor | None = None) -> None:
        self.data = data
        self.buffer = buffer
        self.alloc = alloc
        self._base = base  # keeps the allocation alive while a view lives
        self._parent: NkiTensor | None = None
        self._index: Any = None
        self.producer: Any = None  # the Instruction that wrote this value (fresh results)

    # --- metadata ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.dim()

    @property
    def itemsize(self) -> int:
        return self.data.element_size()

    def __repr__(self) -> str:
        d = str(self.dtype).replace("torch.", "")
        return f"NkiTensor({self.buffer}, {d}{list(self.shape)})"

    def __len__(self) -> int:
        return self.shape[0]

    # --- views -------------------------------------------------------------------------
    def __getitem__(self, idx: Any) -> NkiTensor:
        key, advanced = _torch_index(idx)
        view = NkiTensor(self.data[key], self.buffer, self.alloc, base=self._base if self._base is not None else self)
        if advanced:
            view._parent, view._index = self, key
        return view

    def reshape(self, shape: Any) -> NkiTensor:
        """A view with another shape (HBM tensors: an access pattern for the DMA)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return NkiTensor(self.data.view(shape), self.buffer, self.alloc, base=self._base if self._base is not None else self)

    def broadcast_to(self, shape: Any) -> NkiTensor:
        """A stride-0 view of an HBM tensor (a DMA access pattern), e.g. a weight row
        loaded into all 128 partitions; on-chip tiles cannot broadcast partitions."""
        if self.buffer != "hbm":
            from .errors import NKIError

            raise NKIError("broadcast_to", "only DMA access patterns broadcast (HBM views)",
                           f"{self!r} is on chip", "Broadcast the HBM tensor, then nl.load it")
        return NkiTensor(self.data.expand(tuple(shape)), self.buffer, self.alloc,
                         base=self._base if self._base is not None else self)

    def assign(self, values: torch.Tensor) -> None:
        """Write ``values`` (broadcast, cast to our dtype) into this tensor's storage."""
        values = values.to(self.dtype) if values.dtype != self.dtype else values
        if self._parent is not None:
            self._parent.assign_at(self._index, values.expand(self.shape))
            self.data = self._parent.data[self._index]
        else:
            self.data.copy_(values.expand(self.shape) if values.shape != self.data.shape else values)

    def assign_at(self, key: Any, values: torch.Tensor) -> None:
        if self._parent is not None:
            merged = self.data.clone()
            merged[key] = values
            self.assign(merged)
        else:
            self.data[key] = values

    def __setitem__(self, idx: Any, value: Any) -> None:
        """``tile[...] = expr``: the expression's instruction writes here (no extra copy)."""
        nl = _language()
        nl._write(self[idx], value, "NkiTensor.__setitem__")

    # --- operators (the elementwise ops of nki.language) -------------------------------
    def _op(self, name: str, other: Any, reverse: bool = False) -> NkiTensor:
        nl = _language()
        fn = getattr(nl, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o: Any) -> NkiTensor: return self._op("add", o)
    def __radd__(self, o: Any) -> NkiTensor: return self._op("add", o, True)
    def __sub__(self, o: Any) -> NkiTensor: return self._op("subtract", o)
    def __rsub__(self, o: Any) -> NkiTensor: return self._op("subtract", o, True)
    def __mul__(self, o: Any) -> NkiTensor: return self._op("multiply", o)
    def __rmul__(self, o: Any) -> NkiTensor: return self._op("multiply", o, True)
    def __truediv__(self, o: Any) -> NkiTensor: return self._op("divide", o)
    def __rtruediv__(self, o: Any) -> NkiTensor: return self._op("divide", o, True)
    def __pow__(self, o: Any) -> NkiTensor: return self._op("power", o)
    def __lt__(self, o: Any) -> NkiTensor: return self._op("less", o)  # type: ignore[override]
    def __le__(self, o: Any) -> NkiTensor: return self._op("less_equal", o)  # type: ignore[override]
    def __gt__(self, o: Any) -> NkiTensor: return self._op("greater", o)  # type: ignore[override]
    def __ge__(self, o: Any) -> NkiTensor: return self._op("greater_equal", o)  # type: ignore[override]

    def __neg__(self) -> NkiTensor:
        nl = _language()
        return nl.negative(self)

    def __iadd__(self, o: Any) -> NkiTensor:
        """``psum[...] += nl.matmul(...)``: accumulate in PSUM (fp32) as TensorE does."""
        nl = _language()
        return nl._accumulate(self, o)

    def __bool__(self) -> bool:
        raise TypeError(
            "an NKI tile has no truth value at trace time: the kernel's Python control flow "
            "runs before the values exist on the device; use nl.where or a mask instead")


def _torch_index(idx: Any) -> tuple[Any, bool]:
    """Index for the CPU tensor, and whether it is advanced (index arrays)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    out: list[Any] = []
    advanced = False
    for it in items:
        if isinstance(it, np.ndarray):
            out.append(torch.from_numpy(np.ascontiguousarray(it)).long())
            advanced = True
        elif isinstance(it, NkiTensor):  # indirect DMA: an index tile, [P] or [P, 1]
            ix = it.data.long()
            out.append(ix[:, 0] if ix.dim() == 2 and ix.shape[1] == 1 else ix)
            advanced = True
        else:
            out.append(it)
    return (tuple(out) if isinstance(idx, tuple) else out[0]), advanced


def tile_values(x: Any) -> torch.Tensor | float | int:
    """The CPU values behind ``x``: a tensor for tiles and index arrays, the scalar itself
    otherwise."""
    if isinstance(x, NkiTensor):
        return x.data
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    if isinstance(x, torch.Tensor):
        return x
    return x


def new_tensor(data: torch.Tensor, buffer: str, api: str) -> NkiTensor:
    """A fresh tensor over ``data``, accounted in the running kernel's memory."""
    ctx = current(api)
    t = NkiTensor(data, buffer, None)  # type: ignore[arg-type]
    t.alloc = ctx.allocate(t, buffer, tuple(data.shape), data.element_size(), api)
    return t

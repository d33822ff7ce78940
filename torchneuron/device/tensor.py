"""The neuron tensor: a wrapper subclass whose data lives in a host "HBM" buffer.

Why a wrapper subclass: PyTorch's autograd, views, Dynamo and AOTAutograd all know
how to treat ``_make_wrapper_subclass`` tensors, and ``__tensor_flatten__`` lets
torch.compile see through to the buffer. The wrapper reports the device
``neuron:N`` and the buffer's exact sizes, strides and storage offset, so views,
aliasing and in-place semantics are those of the CPU buffer underneath: a view of
a neuron tensor wraps a view of its buffer.

A tensor may also be *pending*: it has metadata but no buffer yet, because the
value will be produced later (adaptive eager defers ops). Reading ``buffer`` on a
pending tensor asks its producer to materialize it first.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Protocol

import torch

from torchneuron.device import buffers

__all__ = ["NeuronTensor", "set_op_handler", "neuron_device", "pending_tensor", "wrap_buffer"]

_DEVICE_TYPE = "neuron"


_devices: dict[int, torch.device] = {}


def neuron_device(index: int = 0) -> torch.device:
    """``torch.device("neuron", index)``, built once per index (every new tensor asks)."""
    d = _devices.get(index)
    if d is None:
        d = _devices[index] = torch.device(_DEVICE_TYPE, index)
    return d


def _storage_size(size: Any) -> int | None:
    """The bytes a wrapper's own (data-less) storage advertises: PyTorch's default,
    except 1 for a tensor with no elements.

    Why: converting a tensor to a fake tensor (Dynamo, AOTAutograd) resizes the fake
    copy's storage to zero bytes when the real one has zero bytes (``meta_utils``,
    after ``assert_metadata_eq``). On a PrivateUse1 storage, ``resize_`` calls the C++
    ``PrivateUse1HooksInterface::resizePrivateUse1Bytes``, which a Python backend
    cannot provide (``torch._C._acc.PrivateUse1Hooks`` exposes only three methods),
    so every compiled graph with an empty input failed. The wrapper holds no values
    (they live in ``buffer``), so its storage size is never read for data.
    """
    return 1 if 0 in tuple(size) else None


class Pending(Protocol):
    """A value that will exist later; ``materialize`` makes it exist now."""

    def materialize(self) -> torch.Tensor: ...


OpHandler = Callable[[Any, tuple, tuple, dict], Any]
_op_handler: OpHandler | None = None


def set_op_handler(handler: OpHandler) -> None:
    """Install the function that executes aten ops on neuron tensors.

    The device layer owns the tensor type; the dispatch layer (above it) owns what
    running an op means. It registers itself here at import time.
    """
    global _op_handler
    _op_handler = handler


# Per-wrapper state that a copy gets fresh from its own construction, never copied.
_INTERNAL_ATTRS = frozenset({"_buffer", "_pending", "_device_index", "_memory_token"})


class NeuronTensor(torch.Tensor):
    """A tensor on ``neuron:N``; its values live in ``buffer`` (a CPU tensor)."""

    _buffer: torch.Tensor | None
    _pending: Pending | None
    _device_index: int

    @staticmethod
    def __new__(
        cls,
        buffer: torch.Tensor | None,
        device_index: int = 0,
        *,
        meta: torch.Tensor | None = None,
        pending: Pending | None = None,
        requires_grad: bool = False,
    ) -> NeuronTensor:
        like = buffer if buffer is not None else meta
        assert like is not None, "a NeuronTensor needs a buffer or a meta tensor"
        if like.layout != torch.strided:
            # PyTorch's wrapper subclasses cannot carry sparse/mkldnn layouts.
            raise NotImplementedError(
                f"the neuron device supports the strided layout only, not {like.layout}; "
                "keep sparse tensors on the CPU (or call .to_dense() first); for sparse "
                "gradients, build nn.Embedding / nn.EmbeddingBag with sparse=False"
            )
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            like.size(),
            strides=like.stride(),
            storage_offset=like.storage_offset(),
            dtype=like.dtype,
            layout=like.layout,
            device=neuron_device(device_index),
            requires_grad=requires_grad,
            storage_size=_storage_size(like.size()),
        )
        r._buffer = buffer
        r._pending = pending
        r._device_index = device_index
        return r

    @property
    def buffer(self) -> torch.Tensor:
        """The CPU tensor holding this tensor's values (materializing it if pending)."""
        pending = self._pending
        if pending is not None:
            # A pending value, or a deferred in-place write into an existing buffer
            # (``buffers.defer_write``): its producer runs now. It may give this tensor
            # its buffer itself (a region materializes all its values at once).
            self._pending = None
            value = pending.materialize()
            if self._buffer is None:
                _attach(self, value, self._device_index)
        assert self._buffer is not None, "a neuron tensor without a buffer or a producer"
        return self._buffer

    @buffer.setter
    def buffer(self, new: torch.Tensor) -> None:
        """Replace the buffer (same values): AOTAutograd does this to a backward tangent
        whose buffer has other strides than traced (``process_runtime_tangent``), which
        for an empty tensor or a size-1 dimension the wrapper's contiguity cannot see."""
        if new.shape != self.shape or new.dtype != self.dtype:
            raise ValueError(
                f"a neuron tensor's buffer can be replaced only by one of the same shape and "
                f"dtype: expected {tuple(self.shape)} {self.dtype}, got {tuple(new.shape)} "
                f"{new.dtype}"
            )
        if self._pending is not None:
            self.buffer  # a deferred write runs first, as any read of the values would  # noqa: B018
        _attach(self, new, self._device_index)

    def __deepcopy__(self, memo: dict) -> NeuronTensor:
        """``torch.Tensor.__deepcopy__`` clones a wrapper subclass, then overwrites the
        clone's ``__dict__`` with a deep copy of ours: the clone would lose its own buffer
        and memory token for uncounted copies of ours (and a copy of the whole simulated
        core the token points at). Here the clone keeps its internals; only attributes a
        user or ``nn.Parameter`` set (``_is_param``) are deep-copied.

        A parameter (a neuron tensor with ``_is_param``: ``nn.Parameter`` of a subclass)
        is copied as ``nn.Parameter.__deepcopy__`` copies one: values and
        ``requires_grad`` only, no ``.grad`` nor other attributes, so a deep-copied model
        (EMA weights, a frozen reference) starts without gradients as on the CPU."""
        if not self.is_leaf:
            return torch.Tensor.__deepcopy__(self, memo)  # raises PyTorch's error
        if id(self) in memo:
            return memo[id(self)]
        if getattr(self, "_is_param", False):
            param = torch.nn.Parameter(self.data.clone(memory_format=torch.preserve_format),
                                       self.requires_grad)
            memo[id(self)] = param
            return param
        with torch.no_grad():
            new = self.clone()
        if self.requires_grad:
            new.requires_grad_()
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for name, value in self.__dict__.items():
            if name not in _INTERNAL_ATTRS:
                setattr(new, name, copy.deepcopy(value, memo))
        memo[id(self)] = new
        return new

    @property
    def _dynamo_static_indices(self) -> set[int]:
        """The dimensions Dynamo keeps static for this tensor as a graph input: all of
        them for a view, else those ``torch._dynamo.mark_static`` marked.

        Why: after a shape change Dynamo makes an input's sizes symbolic, and it rebuilds
        a view input of a tensor subclass by replaying the view on its fake base. In
        torch 2.13 that replay leaves the view's sizes as expressions in the base's
        symbols, which Dynamo then refuses to bind ("For root tracer, we only expect to
        bind basic symbols"): a compiled LM called on ``ids[:, :-1]`` with a new
        sequence length crashed (plain CPU tensors take another path; PyTorch's own
        ``TwoTensor`` fails the same way). A static view gets a graph per shape, which
        is what the neuron backend compiles anyway (it specializes every shape)."""
        if self._is_view():
            return set(range(self.dim()))
        marked = self.__dict__.get("_dynamo_user_static_indices")
        if marked is None:
            raise AttributeError("_dynamo_static_indices")  # (mark_static tests hasattr)
        return marked

    @_dynamo_static_indices.setter
    def _dynamo_static_indices(self, indices: set[int]) -> None:
        self.__dict__["_dynamo_user_static_indices"] = indices

    @property
    def is_pending(self) -> bool:
        """No buffer yet, or a deferred write into it not yet performed."""
        return self._buffer is None or self._pending is not None

    @property  # type: ignore[override]
    def data(self) -> torch.Tensor:
        return torch._C.TensorBase.data.__get__(self)  # type: ignore[attr-defined]

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        """``t.data = new``: PyTorch copies ``new``'s metadata into ``t``'s TensorImpl,
        which for a wrapper holds no values, so the buffer must follow too (or ``t``
        would keep its old values under the new shape: ``vector_to_parameters`` and
        ``.data`` weight tying would silently do nothing)."""
        if not isinstance(new, NeuronTensor):
            raise RuntimeError(
                f"Attempted to set the .data of a tensor on {self.device} to a tensor on "
                f"{new.device}: a neuron tensor's .data must be a neuron tensor; move it "
                f"first with .to('{self.device}') (or copy values in with .copy_())"
            )
        buffer = new.buffer
        torch._C.TensorBase.data.__set__(self, new)  # type: ignore[attr-defined]
        self._buffer, self._pending, self._device_index = buffer, None, new._device_index
        buffers.track(self, buffer, new._device_index)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        if self._buffer is not None and type(self._buffer) is not torch.Tensor:
            # traced (fake or functional buffer under torch.compile): no values to show
            return f"NeuronTensor({self._buffer!r}, device='{self.device}')"
        from torchneuron.device._repr import neuron_repr

        return neuron_repr(self)

    def storage(self) -> torch.TypedStorage:  # type: ignore[override]
        """The (deprecated) typed storage of the host buffer holding the values.

        Why: safetensors, and with it Hugging Face's ``save_pretrained``, finds tensors
        that share memory by ``untyped_storage().data_ptr()``, falling back to
        ``storage().data_ptr()``; a wrapper's own storage has no data and raises on both
        ("invalid python storage"), so saving a model on ``neuron`` crashed. The buffer's
        storage gives the pointer, the same for views and tied weights of one buffer.
        ``untyped_storage()`` stays the wrapper's: Dynamo and AOTAutograd read it."""
        buffer = self.buffer
        if type(buffer) is not torch.Tensor:  # traced: a fake or functional buffer
            return super().storage()
        return buffer.storage()

    def __format__(self, format_spec: str) -> str:
        """``f"{loss:.4f}"`` formats a 0-dim tensor's value, as for a CPU or CUDA tensor.

        Why: ``torch.Tensor.__format__`` does this only when ``type(self) is Tensor``, so
        every tensor subclass falls through to ``object.__format__``, which rejects any
        format spec (``TypeError: unsupported format string``). A parameter keeps that
        fallthrough, as on the CPU (``nn.Parameter`` is a subclass there too)."""
        is_param = getattr(self, "_is_param", False)
        if self.dim() == 0 and not is_param:
            return self.item().__format__(format_spec)
        if format_spec:  # object.__format__'s error, naming the class CPU's names
            kind = "Parameter" if is_param else "Tensor"
            raise TypeError(f"unsupported format string passed to {kind}.__format__")
        return str(self)

    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["buffer"], {"device_index": self._device_index}

    @staticmethod
    def __tensor_unflatten__(
        inner: dict, meta: dict, outer_size: Any, outer_stride: Any
    ) -> NeuronTensor:
        buffer, index = inner["buffer"], meta["device_index"]
        t = NeuronTensor(buffer, index)
        if type(buffer) is torch.Tensor:  # real values (a compiled graph's output), not a
            buffers.track(t, buffer, index)  # trace's fake ones: counted as eager counts
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
        assert _op_handler is not None, "import torchneuron to register the neuron device"
        return _op_handler(func, types, args, kwargs or {})


def pending_tensor(size: tuple, stride: tuple, offset: int, dtype: torch.dtype,
                   device_index: int, pending: Pending) -> NeuronTensor:
    """A pending strided neuron tensor with this layout: what
    ``NeuronTensor(None, device_index, meta=..., pending=pending)`` makes, without reading
    the layout back from a meta tensor (adaptive eager makes one per deferred output)."""
    return pending_of(size, pending_layout(size, stride, offset, dtype, device_index),
                      device_index, pending)


def pending_layout(size: tuple, stride: tuple, offset: int, dtype: torch.dtype,
                   device_index: int) -> dict[str, Any]:
    """The keyword arguments ``pending_of`` passes to ``_make_wrapper_subclass`` for this
    layout, computed once by a caller that makes many such tensors. An argument whose
    value is its default (offset 0, no storage size, strided, no grad) is left out:
    parsing each costs about as much as a third of the call."""
    kw: dict[str, Any] = {"strides": stride, "dtype": dtype,
                          "device": neuron_device(device_index)}
    if offset:
        kw["storage_offset"] = offset
    storage_size = _storage_size(size)
    if storage_size is not None:
        kw["storage_size"] = storage_size
    return kw


def pending_of(size: tuple, layout: dict[str, Any], device_index: int,
               pending: Pending) -> NeuronTensor:
    """``pending_tensor`` of a layout from ``pending_layout`` (same ``device_index``)."""
    r = _make_wrapper(NeuronTensor, size, **layout)
    r._buffer = None
    r._pending = pending
    r._device_index = device_index
    return r


_make_wrapper = torch.Tensor._make_wrapper_subclass
_STRIDED = torch.strided


def wrap_buffer(buffer: torch.Tensor, device_index: int, *, accounted: bool = True
                ) -> NeuronTensor:
    """A new neuron tensor over ``buffer``: the one function that gives a tensor its buffer.

    Eager dispatch, adaptive eager's replays, NKI kernels, the torch.compile backend and
    its verification all make their tensors here, so every wrapper mirrors its buffer's
    conj/neg bits the same way (``buffers.mirror_bits``). A tensor made before its value
    existed (a pending one) gets its buffer later from ``_attach``, the same steps.

    ``accounted`` (default): the buffer's storage is counted against device
    ``device_index``'s HBM for as long as the tensor lives (``buffers.track``).
    ``accounted=False`` counts nothing: for wrappers that must not change a memory
    figure, because whoever owns the storage counts it or it never was device memory in
    eager (results of ops traced over fake or functional buffers under torch.compile, the
    tensors a traced Dynamo graph builds, the inputs of a graph run eagerly after a failed
    compile).
    """
    if not accounted:
        r = NeuronTensor(buffer, device_index)
        buffers.mirror_bits(r, buffer)
        return r
    if buffer.layout is not _STRIDED:
        return _attach(NeuronTensor(buffer, device_index), buffer, device_index)  # type: ignore[return-value]
    device = _devices.get(device_index)
    if device is None:
        device = neuron_device(device_index)
    offset = buffer.storage_offset()
    if offset or not buffer.numel():  # an empty result needs _storage_size's 1 byte
        r = _make_wrapper(NeuronTensor, buffer.size(), strides=buffer.stride(),
                          storage_offset=offset, dtype=buffer.dtype, device=device,
                          storage_size=_storage_size(buffer.size()))  # fmt: skip
    else:  # most results: the argument is cheaper left out (it defaults to 0)
        r = _make_wrapper(NeuronTensor, buffer.size(), strides=buffer.stride(),
                          dtype=buffer.dtype, device=device)  # fmt: skip
    r._buffer = buffer
    r._pending = None
    r._device_index = device_index
    buffers.track(r, buffer, device_index)
    if buffer.is_conj():
        torch._C._set_conj(r, True)
    if buffer.is_neg():
        torch._C._set_neg(r, True)
    return r


def _attach(wrapper: torch.Tensor, buffer: torch.Tensor, index: int) -> torch.Tensor:
    """Give an existing ``wrapper`` its buffer (a pending tensor materialized, a buffer
    replaced): the steps ``wrap_buffer`` takes for a new one. Accounts the storage against
    device ``index``'s HBM and mirrors the conj/neg bits, so memory statistics and
    autograd's view of the tensor are the same whichever path produced it."""
    wrapper._buffer = buffer  # type: ignore[attr-defined]
    buffers.track(wrapper, buffer, index)
    buffers.mirror_bits(wrapper, buffer)
    return wrapper

"""``nki_op``: a PyTorch custom op whose implementation calls NKI kernels.

Why ``torch.library.custom_op``: it is how PyTorch extends itself, so the op works with
autograd (``register_autograd``), fake tensors and torch.compile (``register_fake``), and
every mode and subclass sees it as one op. On ``neuron`` tensors the op is routed by a
torch-dispatch rule registered for ``NeuronTensor``: its arguments' buffers are
unwrapped, the implementation runs on them, every kernel it calls is charged to the
device's core as one eager launch timed by the kernel's own schedule, and the outputs are
wrapped back. On CPU tensors the implementation runs as is (values only).

Under ``torch.compile(backend="neuron")`` and adaptive eager the op stays one node of the
graph (its fake implementation gives the shapes) and is carried into the executable as a
custom call (``custom_call.py`` registers its target; README, "NKI kernels inside
compiled programs"). A mutating op (``mutates_args``) is carried too, as
functionalization writes it (``auto_functionalized``: the kernel runs on copies of the
arguments it writes, which the program returns and copies back;
``compiler/prepare/mutating_calls.py``); a graph that cannot carry it runs eagerly on
the device, where the op runs through this same rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from torchneuron.device.tensor import NeuronTensor
from torchneuron.hardware import get_core

from . import kernel as _jit
from ._context import charging, collecting

__all__ = ["nki_op", "charging", "collecting"]

def nki_op(name: str, fn: Callable[..., Any] | None = None, *,
           mutates_args: Iterable[str] | str = (), schema: str | None = None,
           fake: Callable[..., Any] | None = None) -> Any:
    """Define custom op ``name`` ("ns::op") implemented by ``fn`` (a typed function that
    calls NKI kernels on its tensor arguments). Usable as a decorator.

    Returns PyTorch's ``CustomOpDef``: call it like a function; add ``register_autograd``
    for training. ``fake``: the op's fake implementation (shapes only); without one, a
    default runs ``fn`` on zeros of the same shapes to learn the outputs' metadata.
    """
    def build(f: Callable[..., Any]) -> Any:
        if mutates_args:
            _install_mutation_rules()
        impl = _as_impl(f)
        op = torch.library.custom_op(name, impl, mutates_args=mutates_args, schema=schema)
        op.register_fake(fake if fake is not None else _default_fake(impl))
        op.register_torch_dispatch(NeuronTensor, _neuron_rule(impl, name))
        from .custom_call import register_op_target  # carried into executables

        register_op_target(op, impl, name)
        return op

    return build(fn) if fn is not None else build


def _as_impl(f: Callable[..., Any]) -> Callable[..., Any]:
    """The op's implementation: ``f`` itself, or a kernel's ``fn`` signature for a Kernel."""
    if isinstance(f, _jit.Kernel):
        kernel = f

        def run(*args: Any, **kwargs: Any) -> Any:
            return kernel(*args, **kwargs)

        run.__signature__ = _signature_of(kernel.fn)  # type: ignore[attr-defined]
        run.__annotations__ = dict(getattr(kernel.fn, "__annotations__", {}))
        run.__name__ = kernel.name
        return run
    return f


def _signature_of(fn: Callable[..., Any]) -> Any:
    import inspect

    return inspect.signature(fn)


def _default_fake(impl: Callable[..., Any]) -> Callable[..., Any]:
    """Shapes by running the implementation on zeros (kernels are pure functions of their
    arguments' shapes for their outputs' metadata)."""
    def fake(*args: Any, **kwargs: Any) -> Any:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        device = next((a.device for a in (*args, *kwargs.values())
                       if isinstance(a, torch.Tensor)), torch.device("cpu"))

        def zeros(a: Any) -> Any:
            return torch.zeros(a.shape, dtype=a.dtype) if isinstance(a, torch.Tensor) else a

        with unset_fake_temporarily(), collecting():  # (shapes only: nothing is charged)
            out = impl(*tree_map(zeros, args), **tree_map(zeros, kwargs))
            meta = tree_map(lambda o: (tuple(o.shape), o.dtype)
                            if isinstance(o, torch.Tensor) else o, out)
        return tree_map(lambda m: torch.empty(m[0], dtype=m[1], device=device)
                        if isinstance(m, tuple) and len(m) == 2 and isinstance(m[1], torch.dtype)
                        else m, meta, is_leaf=lambda m: isinstance(m, tuple))

    return fake


def _neuron_rule(impl: Callable[..., Any], name: str) -> Callable[..., Any]:
    def rule(cls: Any, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        from torchneuron.device.tensor import wrap_buffer as wrap
        from torchneuron.dispatch.eager import _run_op, _tracing
        from torchneuron.dispatch.oprecord import record

        flat = [a for a in (*args, *kwargs.values()) if isinstance(a, NeuronTensor)]
        if _tracing([a.buffer for a in flat]):
            # fake / functional buffers: metadata only, as eager dispatch traces any op
            return _run_op(record(func), func, args, kwargs, None)
        index = flat[0].device.index or 0 if flat else 0
        originals = {a.buffer.data_ptr(): a for a in flat}

        def unwrap(a: Any) -> Any:
            return a.buffer if isinstance(a, NeuronTensor) else a

        core = get_core(index)
        with charging(core):
            out = impl(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        return tree_map(lambda o: _wrap(o, index, originals, wrap), out)

    return rule


def _wrap(o: Any, index: int, originals: dict, wrap: Any) -> Any:
    if not isinstance(o, torch.Tensor):
        return o
    same = originals.get(o.data_ptr())
    if same is not None and same.shape == o.shape:
        return same
    return wrap(o, index)


_mutation_rules: list[bool] = []


def _install_mutation_rules() -> None:
    """Let a graph run eagerly on the device call a mutating custom op (once per process):
    the fallback when the compiler refuses the graph.

    Functionalization wraps such an op in ``auto_functionalized`` (v2), a higher-order op
    with no rule for ``NeuronTensor``: PyTorch's dense kernels (clone the mutated
    arguments, run the op on the clones) serve, each step an op on the device. AOTAutograd
    also runs a graph holding custom ops under its aliasing-check mode, which answers every
    higher-order op with NotImplemented (torch 2.13) and so never reaches that rule: under
    that mode the op is run again with the mode popped.
    """
    if _mutation_rules:
        return
    _mutation_rules.append(True)
    from torch._functorch._aot_autograd import runtime_wrappers as rw
    from torch._higher_order_ops import auto_functionalize as af

    check_mode = getattr(rw, "_AnalyzeCustomOpInputOutputMode", None)
    for hop, dense in ((af.auto_functionalized, af.auto_functionalized_dense),
                       (af.auto_functionalized_v2, af.auto_functionalized_v2_dense)):
        if NeuronTensor not in hop.python_key_table:
            hop.py_impl(NeuronTensor)(dense)
        if check_mode is not None and check_mode not in hop.python_key_table:
            hop.py_impl(check_mode)(_rerun_past_mode(hop))
        hop._dispatch_cache.clear()


def _rerun_past_mode(hop: Any) -> Callable[..., Any]:
    def rule(mode: Any, *args: Any, **kwargs: Any) -> Any:
        return hop(*args, **kwargs)

    return rule

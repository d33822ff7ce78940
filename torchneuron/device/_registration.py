"""Registration of the ``neuron`` device with PyTorch (PrivateUse1, renamed).

Uses PyTorch's Python path for PrivateUse1 backends: the rename, the generated
``Tensor.neuron()`` / ``Module.neuron()`` methods, the device module
(``torch.neuron``), and the hooks and device guard that make
``torch.accelerator`` report the neuron device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from torchneuron.device import group_norm_grad, plain_paths
from torchneuron.device import module as neuron_module
from torchneuron.device import tensor as _tensor
from torchneuron.device._grad_checks import install as install_grad_checks
from torchneuron.device._python_errors import install_engine_wrapper, take_pending_error
from torchneuron.device.pinned import register_pinned_memory

_registered = False
_lib: torch.library.Library | None = None

# Ops that PyTorch's C++ calls on a neuron tensor with the Python dispatch key
# excluded, so they reach the PrivateUse1 key instead of ``__torch_dispatch__``:
# ``torch.tensor(data, device="neuron")``, ``torch.as_tensor``, ``new_tensor`` build
# a CPU tensor and ``copy_`` it into an ``empty`` neuron tensor under
# ``ExcludeDispatchKeyGuard(Python)``. The boxed Python fallback cannot serve that
# call (torch 2.13 trips ``func != nullptr`` in python_dispatch.cpp), so these ops
# get explicit PrivateUse1 kernels that hand them to the op handler.
_PYTHON_KEY_EXCLUDED_OPS = ("copy_",)


# C++ calls these methods, sometimes while a Python error is pending (during backward):
# each takes that error out of the way first (see ``_python_errors``).
class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        take_pending_error()
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        take_pending_error()
        return True

    def is_built(self) -> bool:
        take_pending_error()
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):  # noqa: ANN201
        take_pending_error()
        return torch._C._autograd.DeviceType.PrivateUse1


def _kernel(name: str) -> Callable[..., Any]:
    op = getattr(torch.ops.aten, name).default

    def kernel(*args: Any, **kwargs: Any) -> Any:
        handler = _tensor._op_handler
        assert handler is not None, "import torchneuron to register the neuron device"
        return handler(op, (), args, kwargs)

    return kernel


def _dispatch_rule(cls: type, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
    handler = _tensor._op_handler
    assert handler is not None, "import torchneuron to register the neuron device"
    return handler(func, types, args, kwargs or {})


def _route_dispatch_past_the_dtensor_probe() -> None:
    """Serve ``NeuronTensor`` ops as a ``torch.library`` dispatch rule, not via the class.

    Why: for a tensor subclass with ``__torch_dispatch__``, PyTorch's C++ first asks
    whether the argument is a DTensor, which imports ``torch.distributed.tensor``
    (and sympy with it): one to three seconds on the first op of every process,
    for a program that never uses DTensor. A registered dispatch rule for the
    subclass is consulted *before* that probe, so every op on a neuron tensor is
    given to the same handler ``__torch_dispatch__`` would call, without the
    import. PyTorch looks rules up by (op, exact type) through
    ``simple_registry.find_torch_dispatch_rule``, which its C++ caches on first
    use; we answer for ``NeuronTensor`` and defer everything else. If a subclass
    op ran before torchneuron was imported, the C++ already holds the original
    and nothing changes but the import time.
    """
    from torch._library import simple_registry

    original = simple_registry.find_torch_dispatch_rule
    if getattr(original, "_torchneuron", False):
        return

    # PyTorch asks on every op: the answer per overload is kept (keyed by id, as
    # ``OpOverload`` hashes in Python; the entry keeps the overload alive). A rule
    # registered for ``NeuronTensor`` after its op first ran would not be seen. The same
    # for the dispatch-mode classes in ``_kept`` (``keep_dispatch_rule_answers``).
    answers: dict[int, tuple[Any, Any]] = {}

    def find_torch_dispatch_rule(op: Any, torch_dispatch_class: type) -> Any:
        if torch_dispatch_class is _tensor.NeuronTensor:
            hit = answers.get(id(op))
            if hit is not None and hit[0] is op:
                return hit[1]
            rule = original(op, torch_dispatch_class)
            rule = _dispatch_rule if rule is None else rule
            answers[id(op)] = (op, rule)
            return rule
        kept = _kept.get(torch_dispatch_class)
        if kept is not None:
            hit = kept.get(id(op))
            if hit is not None and hit[0] is op:
                return hit[1]
            rule = original(op, torch_dispatch_class)
            kept[id(op)] = (op, rule)
            return rule
        return original(op, torch_dispatch_class)

    find_torch_dispatch_rule._torchneuron = True  # type: ignore[attr-defined]
    simple_registry.find_torch_dispatch_rule = find_torch_dispatch_rule


# dispatch-mode classes whose rule answers are kept: class -> {id(op): (op, rule)}
_kept: dict[type, dict[int, tuple[Any, Any]]] = {}


def keep_dispatch_rule_answers(mode_class: type) -> None:
    """Keep PyTorch's answer to "which ``torch.library`` dispatch rule has this op for
    ``mode_class``" per op, as for ``NeuronTensor``.

    Why: PyTorch asks before every ``__torch_dispatch__`` of an active mode, through four
    Python calls (``simple_registry``); a mode that sees every op (adaptive eager's) pays
    them on every op. Only for a mode class nobody registers rules for after its first
    use: a rule registered later would not be seen."""
    _kept.setdefault(mode_class, {})


def register() -> None:
    """Make ``torch.device("neuron")`` and ``torch.neuron`` exist (idempotent)."""
    global _registered, _lib
    if _registered:
        return
    _setup_privateuseone_for_python_backend(
        rename="neuron", backend_module=neuron_module, hook=_Hooks(), device_guard=_Guard()
    )
    install_engine_wrapper()
    install_grad_checks()
    _lib = torch.library.Library("aten", "IMPL")
    for name in _PYTHON_KEY_EXCLUDED_OPS:
        _lib.impl(name, _kernel(name), "PrivateUse1")
    register_pinned_memory(_lib)
    plain_paths.register(_lib)
    group_norm_grad.register(_lib)
    _route_dispatch_past_the_dtensor_probe()
    _registered = True

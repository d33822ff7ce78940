"""Dynamo never traces torchneuron's own runtime.

Why: while a compiled function runs, Dynamo's frame hook sees every Python frame,
including the eager ops between graphs (a graph break), which run through
``NeuronTensor.__torch_dispatch__`` and the dispatch, device and hardware code below
it, and buffers' ``__del__`` whenever the garbage collector runs. Left alone, Dynamo
compiles those frames as if they were user code: it splits the runtime at its own
graph breaks (``torch_dynamo_resume_in_run_op_at_...``), guards on its caches, and
fails on ops that only make sense eagerly (``.item()`` inside a data-dependent loss
raised ``DataDependentOutputException`` instead of breaking the user's graph).

The mechanism is Dynamo's skip list (``torch._dynamo.trace_rules.add``, the
"skipfiles"): frames in a skipped folder run as plain Python, and a call into one
from a traced function is a graph break, so torchneuron's API called inside a
compiled function (``torch.neuron.synchronize()``) runs eagerly too. The runtime
packages are listed; ``torchneuron.bench`` is not, since its model zoo is user code
that torch.compile must trace.

Importing ``torch._dynamo`` costs seconds, so ``import torchneuron`` does not: if
Dynamo is not loaded yet, a finder on ``sys.meta_path`` waits for its skip-list
module to load and registers the runtime right after it has executed, before any
frame can be compiled.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["RUNTIME_PACKAGES", "skip_runtime_when_dynamo_loads"]

RUNTIME_PACKAGES = (
    "torchneuron.hardware",
    "torchneuron.device",
    "torchneuron.dispatch",
    "torchneuron.compiler",
    "torchneuron.cache",
    "torchneuron.adaptive_eager",
    "torchneuron.dynamo",
)
_TRACE_RULES = "torch._dynamo.trace_rules"
_registered = False


def _register(trace_rules: ModuleType) -> None:
    global _registered
    if _registered:
        return
    for name in RUNTIME_PACKAGES:
        if importlib.util.find_spec(name) is not None:  # packages not built yet are absent
            trace_rules.add(name)
    _registered = True


class _ThenRegister(importlib.abc.Loader):
    """The real loader of a Dynamo module, then our hook on it."""

    def __init__(self, inner: Any, after: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._after = after

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_data, ... for tracebacks
        return getattr(self._inner, name)


class _WaitForDynamo(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of each awaited Dynamo module once."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self._hooks = hooks

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        after = self._hooks.pop(fullname, None)
        if after is None:
            return None
        if not self._hooks:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader, after)
        return spec


def _hooks() -> dict[str, Callable[[ModuleType], None]]:
    """Dynamo modules and what to do right after each has loaded: the skip list, and
    ``hop_storages``' patch (neuron tensors through ``while_loop``'s aliasing check)."""
    from torchneuron.dynamo import hop_storages

    return {_TRACE_RULES: _register, hop_storages.MODULE: hop_storages.patch}


def skip_runtime_when_dynamo_loads() -> None:
    """Put the runtime packages on Dynamo's skip list now, or as soon as it loads
    (idempotent); the same for the other hooks."""
    if any(isinstance(f, _WaitForDynamo) for f in sys.meta_path):
        return
    pending = {}
    for name, after in _hooks().items():
        loaded = sys.modules.get(name)
        if loaded is not None and not getattr(loaded.__spec__, "_initializing", False):
            after(loaded)
        else:
            pending[name] = after
    if pending:
        sys.meta_path.insert(0, _WaitForDynamo(pending))

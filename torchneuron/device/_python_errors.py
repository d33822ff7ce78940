"""Keep Python errors raised during backward from being lost or aborting the process.

Why this exists: PyTorch's Python path for PrivateUse1 backends implements the device
guard in C++ but asks Python for the device type (``DeviceGuard.type_``) on every guard
call, including from ``noexcept`` functions such as ``exchangeStream``. The autograd
engine holds a stream guard around every node of the backward graph. When a Python
error is raised inside a node (a tensor hook, a post-accumulate-grad hook, a
``__torch_dispatch__`` call of a built-in backward), C++ unwinds with that error still
*pending* in the thread's Python state, and the guard's destructor calls ``type_``.
CPython then refuses to return a value while an error is pending: the call turns into
``SystemError: ... returned a result with an exception set``, pybind11 throws it out of a
``noexcept`` function and the process aborts (``terminate called``), or, when it is
thrown elsewhere, the original error is consumed and ``backward()`` ends with
``SystemError: run_backward returned NULL without setting an exception``.

The fix, in pure Python: every Python method that C++ calls on our behalf first takes a
pending error out of the thread state (``take_pending_error``), so the method returns
normally and nothing aborts; the error is kept here. The autograd engine's
``run_backward`` is wrapped so that, when it then fails without an error, the kept error
is raised instead: the caller sees exactly the exception CPU would have raised.

How a pending error is detected without the C API: a call through the generic
(unspecialized) call path checks for it, and CPython raises ``SystemError`` whose
``__cause__`` is the pending error itself; a ``functools.partial`` is never specialized.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

__all__ = ["take_pending_error", "install_engine_wrapper"]

_PROBE = functools.partial(int)
_lock = threading.Lock()
_kept: list[BaseException] = []


def take_pending_error() -> None:
    """If this thread has a pending Python error, take it out of the thread state and keep it.

    Must be the first thing a C++-called Python method does (before any other call).
    """
    try:
        _PROBE()
    except SystemError as e:
        cause = e.__cause__
        if cause is not None:
            with _lock:
                _kept.append(cause)


def _take_kept() -> BaseException | None:
    with _lock:
        error = _kept[-1] if _kept else None
        _kept.clear()
    return error


class _Engine:
    """``Variable._execution_engine`` with a ``run_backward`` that re-raises kept errors."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        _take_kept()  # an error kept outside backward is not this call's error
        try:
            return self._engine.run_backward(*args, **kwargs)
        except SystemError:
            error = _take_kept()
            if error is None:
                raise
            raise error from None


def install_engine_wrapper() -> None:
    """Wrap the autograd engine's ``run_backward`` (idempotent)."""
    variable = torch.autograd.variable.Variable
    if not isinstance(variable._execution_engine, _Engine):
        variable._execution_engine = _Engine(variable._execution_engine)

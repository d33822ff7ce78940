"""Errors of the NKI layer: which instruction broke which hardware rule, at which kernel line.

Why a dedicated type: a kernel runs at trace time as plain Python, so a broken rule shows
up deep inside ``nki.language`` or ``nki.isa``. The message must instead name the
instruction (``nisa.nc_matmul``), the limit (``stationary free size <= 128``), what was
given, what to do, and the user's kernel line that issued it.
"""

from __future__ import annotations

import os
import sys

__all__ = ["NKIError", "user_line"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def user_line() -> str:
    """``file:line`` of the innermost frame outside ``torchneuron/nki`` (not ``lib/``).

    Kernels of ``torchneuron.nki.lib`` are user code for this purpose: their line is the
    one to report.
    """
    lib_dir = os.path.join(_PKG_DIR, "lib")
    f = sys._getframe(1)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not path.startswith(_PKG_DIR + os.sep) or path.startswith(lib_dir + os.sep):
            return f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"
        f = f.f_back
    return "<unknown>"


class NKIError(RuntimeError):
    """A kernel broke a rule of the NeuronCore (or of the NKI language).

    ``instruction``: the API call that broke it (``nisa.nc_matmul``); ``limit``: the rule
    (``partition dimension <= 128``); ``where``: the kernel's line that issued it.
    """

    def __init__(self, instruction: str, limit: str, detail: str, hint: str = "") -> None:
        self.instruction = instruction
        self.limit = limit
        self.where = user_line()
        msg = f"{instruction}: {detail} (hardware rule: {limit})"
        if hint:
            msg += f". {hint}"
        msg += f"\n  at {self.where}"
        super().__init__(msg)

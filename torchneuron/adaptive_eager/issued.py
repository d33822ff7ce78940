"""Where a deferred op was issued: an error it raises later points at the user's line.

Why: a replay defers ops and runs them at the region's end, so an op whose eager run
checks index values (``x[i]``, gather, embedding, nll_loss... the ops of
``compiler/index_bounds``) raises only when the executable's check fails there, and
the replay redoes its ops eagerly: the error then surfaces at the line that ended the
region (a ``.item()``), several lines after the one that is wrong. Eager would have
raised at the indexing line. The error's type and message are eager's already (the
op itself raises it, run eagerly); this module makes its traceback eager's too.

How: while deferring one of those ops (and only those: no other op raises from its
values), the replay notes the user's frame as (file, line, function), by walking up
past torch's and torchneuron's frames: a few attribute reads, no frame object kept
(a kept frame would keep the user's locals, and so pending values, alive). If the op
raises, ``pointing_at`` gives the error

- a note, "raised by aten.index.Tensor, issued at FILE:LINE in FN and deferred by
  adaptive eager...", which says why the error surfaces at a later line; and
- a last traceback entry at the issuing line: a code object compiled under the user's
  file name, at that line, named as the user's function, raises the error once; its
  frame ends the traceback. Debuggers, pytest and ``traceback.extract_tb`` then show
  the issuing line (with its source, read from the user's file) as the innermost
  frame, where eager's traceback has it; the frames above it are the region's end.

Our internal detection (the executable's failed check) is not chained as the error's
context: the error the user sees is eager's, from the op.
"""

from __future__ import annotations

import linecache
import os
import sys
from typing import Any

import torch

from torchneuron.compiler.prepare import index_bounds

__all__ = ["Issued", "may_raise_later", "user_line", "pointing_at"]

Issued = tuple[str, int, str]  # (file, line, function) of the user's call

_OURS = (os.path.dirname(torch.__file__) + os.sep,
         os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)


def _packet_name(func: Any) -> str:
    """``aten::index_put`` for ``aten.index_put_.default`` (in place or not)."""
    return func.overloadpacket._qualified_op_name.rstrip("_")


_RANGE_CHECKED = frozenset(_packet_name(op) for op in index_bounds._CHECKED)


def may_raise_later(func: Any) -> bool:
    """Whether ``func``, deferred, can raise from its values when it runs at the region's
    end: one of the ops eager checks the index values of (``index_bounds``), or its
    in-place form. Decided once per op of a region (``guard``)."""
    return _packet_name(func) in _RANGE_CHECKED


def user_line() -> Issued | None:
    """The innermost frame of the caller's stack outside torch and torchneuron."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if not code.co_filename.startswith(_OURS):
            return (code.co_filename, f.f_lineno, code.co_name)
        f = f.f_back
    return None


def pointing_at(err: BaseException, where: Issued, op: Any, detail: str) -> BaseException:
    """``err``, raised by ``op`` issued at ``where``, with a note saying so and a last
    traceback entry at that line (see the module's docstring); raise it ``from None``."""
    file, line, name = where
    err.add_note(f"(raised by {op}, issued at {file}:{line} in {name} and {detail})")
    return err.with_traceback(_entry_at(err, file, line, name))


def _entry_at(err: BaseException, file: str, line: int, name: str) -> Any:
    """A traceback entry of a frame at ``file:line`` in ``name`` that raised ``err``.

    The statement is one line as long as the user's or longer, so that the traceback
    draws no carets under a part of the user's line that it would not mean."""
    text = linecache.getline(file, line).rstrip()
    var = "_" * max(len(text), 8)
    code = compile("\n" * (line - 1) + f"raise {var}", file, "exec").replace(co_name=name)
    scope = {var: err.with_traceback(None)}  # raised afresh: the entry is its last
    tb = None
    try:
        exec(code, scope)  # noqa: S102 - our own one-line raise, under the user's name
    except BaseException as raised:  # noqa: BLE001 - it is ``err``
        tb = raised.__traceback__
    finally:
        scope.clear()  # the frame keeps its globals: no cycle back to ``err``
    return tb.tb_next if tb is not None else None  # this function's own entry dropped

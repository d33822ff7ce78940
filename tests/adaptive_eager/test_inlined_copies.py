"""The recorder's op path (``mode.Runtime.on_op`` and ``record``) runs hand-inlined copies
of a few functions, to save a Python call per recorded op (issue 20, deliverable 4), and
reads three private names. Each copy is pinned to its function here: a fingerprint of the
function's source and the copy's lines together, so a change to either one alone fails
this test until the other is looked at (change both, then the fingerprint). The private
names are checked to be what the public functions read."""

from __future__ import annotations

import hashlib
import inspect
import textwrap
from typing import Any

import torch

from torchneuron.adaptive_eager import growing, mode, recorder, trail
from torchneuron.dispatch import oprecord
from torchneuron.hardware import get_core, settings
from torchneuron.hardware.timeline import Timeline

# (function, the method of ``mode.Runtime`` holding its copy, the copy's first line
# (a comment there names the function), the copy's length in lines, its fingerprint)
_COPIES: list[tuple[Any, Any, str, int, str]] = [
    (Timeline.host, mode.Runtime.record, '# ``tl.host(ns, "record")``, without its call', 8,
     "6f8fce27851a7750"),
    (growing.Growing.saw, mode.Runtime.record, "# ``g.saw(func, static)``, without its call", 4,
     "26d111ba321394c8"),
    (recorder.run_eagerly, mode.Runtime.record, "# ``run_eagerly``, without its call", 6,
     "0b09ec07c3dc6341"),
    (trail.outputs, mode.Runtime.record, "# ``trail.outputs``, without its call", 4,
     "955bf07e5c9d9f01"),
    (trail.taken, mode.Runtime.on_op, "# the op's flat check (``trail.taken``, inlined)", 11,
     "1e0d906db3133d7f"),
    (get_core, mode.Runtime.record, "# ``get_core``, without its call once made", 3,
     "956465296d34e97f"),
    (oprecord.record, mode.Runtime.on_op, "# ``record(func)``, without its call once built", 3,
     "b4ad466eca381f79"),
    # (where no pattern is, ``kind`` is FIXED, as ``varies`` says, and ``cut(FIXED)`` only
    # sets ``run``)
    (growing.Growing.varies, mode.Runtime.on_op, "# a pattern here (``at``)", 1,
     "0af878441f2ce378"),
    (growing.Growing.cut, mode.Runtime.on_op,
     "# ``g.cut(g.kind(func, static))``: FIXED here, never a cut", 2, "2f24d79eca0561e1"),
]


def _copy_of(method: Any, marker: str, n: int) -> str:
    lines = inspect.getsource(method).splitlines()
    at = [i for i, line in enumerate(lines) if marker in line]
    assert len(at) == 1, f"{method.__qualname__}: the line {marker!r} is not there once"
    return textwrap.dedent("\n".join(lines[at[0]:at[0] + n]))


def _fingerprint(func: Any, copy: str) -> str:
    text = textwrap.dedent(inspect.getsource(func)) + "\n----\n" + copy
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_each_inlined_copy_changes_with_its_function() -> None:
    changed = []
    for func, method, marker, n, want in _COPIES:
        got = _fingerprint(func, _copy_of(method, marker, n))
        if got != want:
            changed.append(f"{func.__qualname__} or its copy in {method.__qualname__} "
                           f"(from {marker!r}) changed: fingerprint {got}, pinned {want}")
    assert not changed, (
        "an inlined copy and its function must say the same: look at both, change the "
        "other one to match, then pin the new fingerprint in _COPIES:\n" + "\n".join(changed))


def test_the_private_names_the_op_path_reads_are_what_the_public_functions_read() -> None:
    """``settings._values`` is where ``get_value`` finds a value set (the op path reads
    ``ae_max_region_ops`` there), ``oprecord._records`` is ``record``'s table by the
    op's id, ``growing._MAX_STEP_OPS`` is ``Growing.saw``'s bound and
    ``hardware.core._cores`` is ``get_core``'s table."""
    with settings.override(ae_max_region_ops=1234):
        assert mode._set_values is settings._values
        assert mode._set_values.get("ae_max_region_ops") == settings.get_value("ae_max_region_ops")
    f = torch.ops.aten.add.Tensor
    rec = oprecord.record(f)
    assert mode._records is oprecord._records and mode._records.get(id(f)) is rec
    assert rec.func is f
    from torchneuron.hardware import core

    c0 = core.get_core(0)
    assert mode._cores is core._cores and mode._cores.get(0) is c0
    g = growing.Growing()
    g.pos = mode._MAX_STEP_OPS
    g.saw(f, ())
    assert g.chunks == [] and g.pos == mode._MAX_STEP_OPS + 1
    g.pos = mode._MAX_STEP_OPS - 1
    g.saw(f, ())
    assert g.chunks == [(None, f, ())]

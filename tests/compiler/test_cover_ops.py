"""OpInfo ops that were refused by the compiler and now compile (issue 7 coverage).

Each op runs every one of its own OpInfo samples through ``tools/lowering_coverage.py``'s
check: eager CPU is the reference, the compiled executable must match it on every sample
(no refusal, no mismatch, no run error), and the compiler's stats count no failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import torchneuron.compiler as tc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import lowering_coverage  # noqa: E402

NOW_COMPILED = ["resize_", "resize_as_"]


def _op(name: str) -> object:
    from torch.testing._internal.common_methods_invocations import op_db

    (op,) = [o for o in op_db if o.name == name and not o.variant_test_name]
    return op


@pytest.mark.parametrize("name", NOW_COMPILED)
def test_every_sample_compiles_to_eagers_numbers(name: str, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    import torch.testing._internal.common_methods_invocations as cmi

    # as the sweep does: OpInfo's reseeding wrapper off, the sweep seeds both runs
    monkeypatch.setattr(cmi, "wrapper_set_seed", lambda f, *a, **k: f(*a, **k))
    tc.reset_stats()
    result = lowering_coverage.run_op(_op(name), 0)
    assert result["status"] == "pass", result
    assert result["samples"].get("pass", 0) > 0, result
    assert tc.stats()["failures"] == 0, tc.stats()


def test_growing_resize_stays_refused() -> None:
    """Grown elements are uninitialised memory eagerly: no compiled number to give."""
    from torchneuron.compiler import compile_graph
    from torchneuron.compiler.errors import CompileError

    with pytest.raises(CompileError):
        compile_graph(lambda x: torch.ops.aten.resize(x, [4, 4]), [torch.randn(3, 3)])

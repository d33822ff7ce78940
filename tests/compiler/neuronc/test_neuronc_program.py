"""Program serialization (JSON only, exact round trip) and the printed report."""

from __future__ import annotations

import json

import pytest
from neuronc_programs import mlp

from torchneuron.compiler.neuronc import PASSES, Program, compile_module, format_program


def test_to_dict_json_round_trip_is_exact(trn2):
    program = compile_module(mlp(), trn2)
    d = program.to_dict()
    text = json.dumps(d, allow_nan=False)
    back = Program.from_dict(json.loads(text))
    assert back.to_dict() == d
    assert json.dumps(back.to_dict(), allow_nan=False) == text
    assert back.kernels == program.kernels and back.cost == program.cost
    assert format_program(back) == format_program(program)


def test_from_dict_refuses_other_format_versions(trn2):
    d = compile_module(mlp(), trn2).to_dict()
    d["format_version"] = 999
    with pytest.raises(ValueError, match="recompile"):
        Program.from_dict(d)


def test_pass_order_and_options(trn2):
    assert [p.__name__.rsplit(".", 1)[-1] for p in PASSES] == [
        "dce",
        "constant_fold",
        "fuse",
        "assign_engines",
        "tile",
        "allocate",
        "schedule",
    ]
    program = compile_module(mlp(), trn2, {"dce": False, "fuse": False})
    assert program.passes_run[:3] == ["dce(off)", "constant_fold", "fuse(off)"]
    with pytest.raises(ValueError, match="unknown neuronc options"):
        compile_module(mlp(), trn2, {"fusion": False})
    with pytest.raises(ValueError, match="cannot be disabled"):
        compile_module(mlp(), trn2, {"schedule": False})


def test_report_lists_kernels_and_savings(trn2):
    program = compile_module(mlp(), trn2)
    text = format_program(program)
    assert "fused_dot_general_add_logistic" in text
    assert "5 StableHLO ops -> 2 kernels" in text
    assert program.cost is not None
    assert f"fusion saved {program.cost.launches_saved} launches" in text
    assert "-bound" in text and "sbuf=" in text and "mm=" in text

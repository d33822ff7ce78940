"""``python -m torchneuron.run`` on a new user's first tries: a mistyped script name, a
module, and a run too short for its compiles, whose summary says why nothing replayed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torchneuron import run as run_cmd
from torchneuron.hardware.settings import override

_LOOP = """
import torch, torch.nn.functional as F
import torchneuron
m = torch.nn.Linear(16, 4).to("neuron")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(4):
    loss = F.mse_loss(m(torch.ones(8, 16, device="neuron")), torch.zeros(8, 4, device="neuron"))
    opt.zero_grad(); loss.backward(); opt.step()
    print(step, loss.item())
"""


@pytest.fixture(autouse=True)
def _own_argv_and_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_a_missing_script_is_one_line_and_exit_2(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cmd.main([str(tmp_path / "trian.py")]) == 2  # as `python trian.py` exits
    err = capsys.readouterr().err
    assert err.strip() == f"torchneuron.run: can't open file '{tmp_path / 'trian.py'}': no such file"


def test_a_module_runs_as_with_python_dash_m(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train_mod.py").write_text(_LOOP)
    sys.path.insert(0, str(tmp_path))
    assert run_cmd.main(["-m", "train_mod"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].startswith("0 ") and "adaptive eager:" in out.err


def test_a_run_shorter_than_its_compile_says_so(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text(_LOOP)
    with override(compile_latency=True):  # the modeled compile outlasts 4 steps
        assert run_cmd.main([str(script)]) == 0
    err = capsys.readouterr().err
    assert "the script ended (at " in err and "before the modeled compile of its" in err, err
    assert "still compiling" not in err, err  # compiled, but after the loop it served
    assert "run more steps" in err and " s)" in err  # the times in seconds too

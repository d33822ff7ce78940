"""Dynamo never traces torchneuron's runtime (issue 7, item 4).

Eager ops between graphs (a graph break) run through ``__torch_dispatch__`` and the
dispatch/device code while Dynamo's frame hook is active; those frames must run as
plain Python, not be compiled as user code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

import torchneuron.compiler as tc
from torchneuron.device import buffers
from torchneuron.device.tensor import NeuronTensor
from torchneuron.dispatch import eager

_ROOT = str(Path(__file__).resolve().parents[2])


def test_runtime_frames_are_on_dynamos_skip_list() -> None:
    from torch._dynamo import trace_rules

    for fn in (NeuronTensor.__torch_dispatch__, eager.run_op, buffers._Token.__del__):
        code = fn.__code__
        assert trace_rules.check_verbose(code).skipped, code.co_filename


def test_data_dependent_loss_breaks_the_graph_instead_of_tracing_the_runtime() -> None:
    """GaussianNLLLoss checks ``torch.any(var < 0)`` in Python: a graph break. The eager
    ops after it used to be traced by Dynamo inside ``dispatch/eager.py``, which raised
    DataDependentOutputException on the ``.item()``."""
    torch._dynamo.reset()
    tc.reset_stats()
    torch.manual_seed(0)
    loss = torch.nn.GaussianNLLLoss()
    a = torch.randn(4, 3, requires_grad=True)
    b, var = torch.randn(4, 3), torch.rand(4, 3) + 0.1
    want = loss(a, b, var)
    want.backward()
    ad = a.detach().to("neuron").requires_grad_()
    got = torch.compile(loss, backend="neuron")(ad, b.to("neuron"), var.to("neuron"))
    got.backward()
    torch.testing.assert_close(got.cpu(), want.detach())
    torch.testing.assert_close(ad.grad.cpu(), a.grad)
    assert tc.stats()["failures"] == 0, tc.explain()


def test_torchneuron_api_inside_a_compiled_function_runs_eagerly() -> None:
    torch._dynamo.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        torch.neuron.synchronize()
        return y + 1

    x = torch.randn(5)
    got = torch.compile(f, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), x * 2 + 1)


SCRIPT = """
import sys
import torchneuron
assert "torch._dynamo" not in sys.modules, "import torchneuron must not load Dynamo"
from torch._dynamo import trace_rules
from torchneuron.dispatch import eager
assert trace_rules.check_verbose(eager.run_op.__code__).skipped
print("ok")
"""


def test_skip_list_registered_when_dynamo_loads_after_torchneuron() -> None:
    env = {**os.environ, "PYTHONPATH": _ROOT}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300, env=env, cwd=_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"

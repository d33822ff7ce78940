"""neuronc's op-by-op baseline (``_work.eager_baseline``, the program cost's ``eager_ns``)
costs a custom call as eager runs it, not as a plain vector op: an NKI call by its plan,
each of its kernels one eager launch timed by its own schedule (what ``nki_op`` charges
the device eagerly), and a call of eager's own kernel by its ``costed`` form."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import torchneuron
from tests.nki.example_kernels import add_kernel
from torchneuron import nki
from torchneuron.compiler import compile_graph
from torchneuron.hardware import get_core


@nki.nki_op("nkibase::add_twice")
def _add_twice(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Two kernels in one op: two eager launches."""
    return add_kernel(add_kernel(a, b), b)


def _eager_device(fn, *inputs: torch.Tensor) -> tuple[int, int]:  # noqa: ANN001
    """(device busy ns, kernel launches) of ``fn`` run eagerly on the device."""
    core = get_core(0)
    on_device = [t.to("neuron") for t in inputs]
    torch.neuron.synchronize()
    before = core.stats()
    fn(*on_device)
    torch.neuron.synchronize()
    after = core.stats()
    return (after["device_busy_ns"] - before["device_busy_ns"],
            after["kernel_launches"] - before["kernel_launches"])


def test_nki_call_costed_as_its_kernels_eager_launches(fresh_cores):
    a, b = torch.randn(256, 512), torch.randn(256, 512)
    cost = compile_graph(_add_twice, [a, b]).program["cost"]
    busy, launches = _eager_device(_add_twice, a, b)
    assert launches == 2 and cost["eager_launches"] == launches
    launch_ns = torchneuron.current_profile().kernel_launch_ns
    assert cost["eager_ns"] == busy + launches * launch_ns
    # next to other ops: those keep their own op-by-op cost
    mixed = compile_graph(lambda x, y: _add_twice(x, y) * 2, [a, b]).program["cost"]
    assert mixed["eager_launches"] == 3 and mixed["eager_ns"] > cost["eager_ns"]


def test_eager_kernel_call_costed_by_its_costed_form():
    """A lone call of eager's log_softmax kernel: the baseline's kernel is the compiled
    one (both costed by the call's costed form, a reduction) plus its launch."""
    x = torch.randn(256, 512)
    exe = compile_graph(lambda t: F.log_softmax(t, -1), [x])
    [kernel] = exe.program["kernels"]
    assert "aten._log_softmax" in kernel["name"] and kernel["kind"] == "reduce"
    cost = exe.program["cost"]
    launch_ns = torchneuron.current_profile().kernel_launch_ns
    assert cost["eager_launches"] == 1
    assert cost["eager_ns"] == kernel["cost"]["unscheduled_total_ns"] + launch_ns

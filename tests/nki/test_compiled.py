"""``nki_op``s under ``torch.compile(backend="neuron")``: carried into the executable as
custom calls (not refused), with eager's numbers, autograd through FlashAttention's
backward, and each call costed by its kernels' own schedule."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchneuron.profiler
from torchneuron import nki
from torchneuron.hardware import get_core
from torchneuron.nki.lib.attention import flash_attention_bwd_kernel, flash_attention_fwd_kernel
from torchneuron.nki.lib.norms import rms_norm_kernel

_stats = __import__("torchneuron.compiler.stats", fromlist=["stats"])
B, S, H, D = 1, 128, 2, 32


class AttentionBlock(nn.Module):
    """Pre-norm causal self-attention: NKI RMSNorm (frozen weight) and NKI FlashAttention."""

    def __init__(self) -> None:
        super().__init__()
        self.norm_weight = nn.Parameter(torch.rand(H * D) + 0.5, requires_grad=False)
        self.qkv = nn.Linear(H * D, 3 * H * D)
        self.out = nn.Linear(H * D, H * D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nki.lib.rms_norm(x, self.norm_weight)
        q, k, v = self.qkv(h).view(B, S, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
        a = nki.lib.flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
        return x + self.out(a.transpose(1, 2).reshape(B, S, H * D))


def _step(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    y = model(x)
    y.square().mean().backward()
    return y.detach().cpu(), [p.grad.cpu() for p in model.parameters() if p.requires_grad]


def _custom_call_kernels(prof) -> list[dict]:  # noqa: ANN001
    """The compiled programs' custom-call kernels launched while ``prof`` recorded."""
    seen, kernels = set(), []
    for ev in prof.events:
        exe = getattr(ev, "executable", None)
        if exe is None or id(exe) in seen:
            continue
        seen.add(id(exe))
        body = exe._module().functions[exe._module().entry].body
        for k in exe.program["kernels"]:
            ops = [body[i] for i in k["op_indices"]]
            if len(ops) == 1 and ops[0].name == "stablehlo.custom_call":
                kernels.append({"target": ops[0].attributes["call_target_name"], **k["cost"]})
    return kernels


def test_attention_block_compiled_with_nki_kernels_as_custom_calls(fresh_cores):
    torch.manual_seed(0)
    model = AttentionBlock().to("neuron")
    x = torch.randn(B, S, H * D).to("neuron")
    want_y, want_grads = _step(model, x)  # eager: each nki_op runs its kernels on the core
    eager_kernels = {k for k in get_core(0).ops if k.startswith("nki.")}
    assert eager_kernels == {"nki.rms_norm_kernel", "nki.flash_attention_fwd_kernel",
                             "nki.flash_attention_bwd_kernel"}
    before = dict(_stats.stats()["failures_by_stage"])
    compiled = torch.compile(model, backend="neuron")
    _step(compiled, x)  # compiles forward and backward
    launched = dict(get_core(0).ops)
    with torchneuron.profiler.profile() as prof:
        got_y, got_grads = _step(compiled, x)
    assert _stats.stats()["failures_by_stage"] == before  # nothing refused
    assert {k: v for k, v in get_core(0).ops.items() if k.startswith("nki.")} == \
        {k: v for k, v in launched.items() if k.startswith("nki.")}  # no eager kernel launch
    assert torch.equal(got_y, want_y)
    for got, want in zip(got_grads, want_grads, strict=True):
        assert torch.equal(got, want)
    # each custom call is charged its kernels' own schedule (the kernels on these shapes)
    calls = {k["target"]: k for k in _custom_call_kernels(prof)}
    assert set(calls) == {"nki.nki_lib.rms_norm", "nki.nki_lib.flash_attention_fwd",
                          "nki.nki_lib.flash_attention_bwd"}
    xs = x.cpu().reshape(-1, H * D)
    rms_norm_kernel(xs, model.norm_weight.cpu(), 1e-6)
    assert calls["nki.nki_lib.rms_norm"]["total_ns"] == rms_norm_kernel.last_schedule.total_ns
    for name, kernel in (("fwd", flash_attention_fwd_kernel), ("bwd", flash_attention_bwd_kernel)):
        assert calls[f"nki.nki_lib.flash_attention_{name}"]["total_ns"] == \
            kernel.last_schedule.total_ns  # (last run: the eager step's, same shapes)
        assert calls[f"nki.nki_lib.flash_attention_{name}"]["engine_ns"]["tensor"] > 0
    launches = [ev for ev in prof.events if getattr(ev, "executable", None)]
    assert sum(ev.duration_ns for ev in launches) > sum(k["total_ns"] for k in calls.values())
    # the kernels' instructions are on the profiler's NKI tracks, inside the launches
    nki_events = [ev for ev in prof.events if ev.track.startswith("nki.")]
    assert {"nki.tensor", "nki.vector", "nki.dma"} <= {ev.track for ev in nki_events}
    assert all(any(x.start_ns <= ev.start_ns <= ev.end_ns <= x.end_ns for x in launches)
               for ev in nki_events)


def test_unknown_target_in_a_cached_executable_is_a_miss():
    from torchneuron.compiler.executable import Executable, ExecutableFormatError, check_entry
    from torchneuron.compiler.keys import executable_key

    x = torch.randn(256, 64)
    exe = torchneuron.compiler.compile_graph(lambda t: nki.lib.softmax(t) * 2, [x])
    assert "stablehlo.custom_call @nki.nki_lib.softmax" in exe.stablehlo
    torch.testing.assert_close(exe.run([x])[0], torch.softmax(x, -1) * 2)
    # the same entry naming a kernel nobody registered: refused as unusable (a miss)
    data = exe.to_bytes().replace(b"nki.nki_lib.softmax", b"nki.nowhere.kernel")
    forged = Executable.from_bytes(data)
    key, _ = executable_key(forged.stablehlo, forged.target, forged.options, forged.signature)
    with pytest.raises(ExecutableFormatError, match="nki.nowhere.kernel"):
        check_entry(data, key)


def test_moe_compiled_charges_what_its_kernels_did_on_these_values(fresh_cores):
    """MoE's work depends on the routing (blocks per expert): the program is costed with
    the plan made on zeros, and a run charges the difference to what the kernels (and the
    grouping) did on the actual values."""
    from torchneuron.nki.op import collecting

    torch.manual_seed(0)
    t, h, f, e = 128, 128, 128, 4
    args = [torch.randn(t, h), torch.randn(h, e), torch.randn(e, h, f) / 11,
            torch.randn(e, h, f) / 11, torch.randn(e, f, h) / 16]
    want = nki.lib.moe(*(a.to("neuron") for a in args), 2).cpu()  # eager on the device
    with collecting() as schedules:  # what the kernels do on these values
        nki.lib.moe(*args, 2)
    actual = sum(s.total_ns for s in schedules)
    assert "moe_group_tokens" in [s.name for s in schedules]
    compiled = torch.compile(lambda *a: nki.lib.moe(*a, 2) * 1.0, backend="neuron")
    neuron_args = [a.to("neuron") for a in args]
    compiled(*neuron_args)
    with torchneuron.profiler.profile() as prof:
        got = compiled(*neuron_args).cpu()
    assert torch.equal(got, want)
    (call,) = _custom_call_kernels(prof)
    (launch,) = [ev for ev in prof.events if getattr(ev, "executable", None)]
    planned = call["total_ns"]
    assert planned != actual  # (zeros route every token to experts 0 and 1)
    assert launch.duration_ns == launch.executable.device_ns - planned + actual


@nki.nki_op("nkitest::scaled_copy")
def _scaled_copy(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    from tests.nki.example_kernels import add_kernel

    return add_kernel(a, a).to(dtype)


def test_op_that_cannot_be_carried_is_refused_saying_why(fresh_cores):
    """A dtype argument has no JSON form: the graph is refused (``custom-op``) with the
    reason, and runs eagerly on the device, with the op's own kernels."""
    x = torch.randn(128, 32)
    before = _stats.stats()["failures_by_stage"].get("prepare:custom-op", 0)
    out = torch.compile(lambda t: _scaled_copy(t, torch.float64) + 1, backend="neuron")(
        x.to("neuron"))
    assert torch.equal(out.cpu(), (x + x).double() + 1)
    assert _stats.stats()["failures_by_stage"]["prepare:custom-op"] == before + 1
    assert "cannot be written as JSON" in torchneuron.compiler.explain()
    assert get_core(0).ops["nki.add_kernel"] == 1


def test_plan_for_another_profile_is_refused_not_rescaled():
    """Kernels are planned on the current hardware; a program for another is refused."""
    here = torchneuron.current_profile().name
    other = "trn3" if here == "trn2" else "trn2"
    with pytest.raises(torchneuron.compiler.CompileError, match=f"planned for {here}"):
        torchneuron.compiler.compile_graph(lambda t: nki.lib.softmax(t) * 2,
                                           [torch.randn(256, 64)], target=other)

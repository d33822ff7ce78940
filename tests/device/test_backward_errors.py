"""Errors raised during backward reach the caller, as on CPU, and the process goes on.

Why a subprocess: before the fix such an error aborted the process
(``terminate called without an active exception``) or was lost
(``SystemError: run_backward returned NULL``), depending on a race with the neuron
autograd thread; an abort would kill the test runner. The child repeats every case
many times, then runs a backward that must succeed, and reports what each case raised
on neuron and on CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPEATS = 10

CHILD = r"""
import json, sys, torch, torchneuron

def hook_error(dev):
    x = torch.randn(3, 5, device=dev, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g @ torch.ones(7, 7, device=dev))
    y.sum().backward()

def post_accumulate_hook_error(dev):
    x = torch.randn(3, 5, device=dev, requires_grad=True)
    def hook(p):
        raise ValueError("raised in a post-accumulate-grad hook")
    x.register_post_accumulate_grad_hook(hook)
    (x * 2).sum().backward()

class BadBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        raise KeyError("raised in a custom backward")

def custom_function_error(dev):
    x = torch.randn(3, device=dev, requires_grad=True)
    torch.autograd.grad(BadBackward.apply(x).sum(), x)

def sparse_embedding(dev):
    e = torch.nn.Embedding(10, 4, sparse=True).to(dev)
    e(torch.tensor([1, 2], device=dev)).sum().backward()

cases = [hook_error, post_accumulate_hook_error, custom_function_error, sparse_embedding]
out = {}
for dev in ("cpu", "neuron"):
    for case in cases:
        seen = set()
        for _ in range(int(sys.argv[1]) if dev == "neuron" else 1):
            try:
                case(dev)
                seen.add("no error")
            except Exception as e:
                seen.add(f"{type(e).__name__}: {e}")
        out[f"{dev}/{case.__name__}"] = sorted(seen)
x = torch.ones(3, device="neuron", requires_grad=True)
(x * 3).sum().backward()
out["after"] = x.grad.cpu().tolist()
print(json.dumps(out))
"""


def test_errors_in_backward_reach_the_caller_and_the_process_goes_on() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCHNEURON_COMPILE_LATENCY="0")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPEATS)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stderr[-2000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for case in ("hook_error", "post_accumulate_hook_error", "custom_function_error"):
        # every repetition raised exactly CPU's exception, type and message
        assert out[f"neuron/{case}"] == out[f"cpu/{case}"], case
        assert out[f"cpu/{case}"] != ["no error"]
    # CPU builds a sparse gradient; the neuron device has no sparse layout and says so
    assert out["cpu/sparse_embedding"] == ["no error"]
    [msg] = out["neuron/sparse_embedding"]
    assert msg.startswith("NotImplementedError:") and "sparse=False" in msg
    assert out["after"] == [3.0, 3.0, 3.0]

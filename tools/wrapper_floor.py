"""The least a Python tensor-subclass device can cost: the zoo's training loops on a
bare wrapper subclass, next to plain CPU PyTorch.

Why: the neuron device is a ``_make_wrapper_subclass`` tensor whose every aten op goes
through ``__torch_dispatch__`` in Python. A wrapper whose ``__torch_dispatch__`` only
unwraps, calls the CPU op and rewraps (no device accounting, no cost model) is the floor
under any such device; issue 11's per-op target is judged against it. Prints ms per
training step (median of process CPU time) for CPU, the bare wrapper and, for reference,
eager on ``neuron``::

    PYTHONPATH=$PWD TORCHNEURON_COMPILE_LATENCY=0 python tools/wrapper_floor.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torchneuron  # noqa: E402, F401
from tests import loops  # noqa: E402

WARMUP, ROUNDS = 3, 15


class Bare(torch.Tensor):
    """A wrapper subclass that does nothing but forward each op to its CPU buffer."""

    buf: torch.Tensor

    @staticmethod
    def __new__(cls, buf: torch.Tensor) -> Bare:
        r = torch.Tensor._make_wrapper_subclass(
            cls, buf.size(), strides=buf.stride(), storage_offset=buf.storage_offset(),
            dtype=buf.dtype, device=buf.device, requires_grad=False,
        )  # fmt: skip
        r.buf = buf
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        same: dict[int, Bare] = {}

        def unwrap(a: Any) -> Any:
            if type(a) is Bare:
                same[id(a.buf)] = a
                return a.buf
            if type(a) in (list, tuple):
                return type(a)(unwrap(x) for x in a)
            return a

        def wrap(o: Any) -> Any:
            if type(o) is torch.Tensor:
                hit = same.get(id(o))
                return Bare(o) if hit is None else hit
            if type(o) in (list, tuple):
                return type(o)(wrap(x) for x in o)
            return o

        out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        return wrap(out)


def _bare_step(name: str) -> Any:
    torch.manual_seed(0)
    model = loops._BUILD[name]().train()
    for m in model.modules():
        for k, p in list(m._parameters.items()):
            if p is not None:
                m._parameters[k] = nn.Parameter(Bare(p.data.clone()), requires_grad=True)
        for k, b in list(m._buffers.items()):
            if b is not None:
                m._buffers[k] = Bare(b.clone())
    opt = loops._OPT[name](model)
    x, y = (Bare(t) for t in loops._data(name, 0))

    def step() -> torch.Tensor:
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _median_ms(step: Any) -> float:
    for _ in range(WARMUP):
        step()
    times = []
    for _ in range(ROUNDS):
        t = time.process_time()
        step()
        times.append(time.process_time() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'loop':<16}{'cpu ms':>9}{'bare ms':>9}{'neuron ms':>11}{'bare/cpu':>10}{'neuron/cpu':>12}")
    for name in loops.LOOPS:
        cpu = _median_ms(loops.make_loop(name, "cpu").step)
        bare = _median_ms(_bare_step(name))
        dev = _median_ms(loops.make_loop(name, "eager").step)
        print(f"{name:<16}{cpu:>9.2f}{bare:>9.2f}{dev:>11.2f}{bare / cpu:>9.1f}x{dev / cpu:>11.1f}x")


if __name__ == "__main__":
    main()

"""A custom call's operands die with the call: running a program must not leave them in
a reference cycle (``custom_targets.fill_arguments`` once filled the arguments with a
nested function that called itself, so every operand lived until the garbage collector
ran, and the device's memory with it: the transformer loop's peak memory then depended
on when the collector had last run)."""

from __future__ import annotations

import gc
import weakref

import torch

from torchneuron.compiler import compile_graph


def test_operands_of_a_custom_call_are_freed_without_the_garbage_collector() -> None:
    exe = compile_graph(lambda x: torch.erf(x) * 2, [torch.randn(64)], name="erf_twice")
    x = torch.randn(64)
    want = torch.erf(x) * 2
    gc.collect()
    gc.disable()
    try:
        [out] = exe.run([x])
        alive = weakref.ref(x)
        del x
        assert alive() is None, "the operand outlived the call (a reference cycle holds it)"
    finally:
        gc.enable()
    assert torch.equal(out, want)

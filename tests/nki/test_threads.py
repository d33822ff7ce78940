"""Kernels traced on two threads at once (an adaptive-eager background compile runs an
``nki_op``'s fake or cost plan while the main thread runs the op on the device): neither
thread's kernels land in the other's charges, instruction stream or thread setting."""

from __future__ import annotations

import threading

import torch

import torchneuron.nki.language as nl
from tests.nki.example_kernels import tiled_add_kernel
from torchneuron import nki
from torchneuron.hardware import get_core
from torchneuron.nki import op as nki_op_module


def _on_thread(fn) -> None:  # noqa: ANN001
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the main thread
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def test_kernel_on_another_thread_is_not_charged_to_this_threads_core(fresh_cores):
    core = get_core(0)
    a = torch.randn(256, 64)
    with nki_op_module.charging(core):  # the main thread inside an nki_op on the device
        _on_thread(lambda: tiled_add_kernel(a, a))  # e.g. a default fake in a compile
    assert not any(k.startswith("nki.") for k in core.ops), dict(core.ops)


@nki.jit
def _blocking_copy(x, started, release):
    """Copies x's first tile; halts mid-kernel until ``release`` is set."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[0:128, :])
    started.set()
    release.wait(timeout=30)
    nl.store(out[0:128, :], value=t)
    return out


@nki.jit
def _copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(x[0:128, :]))
    return out


def test_overlapping_traces_keep_their_instructions_and_thread_setting():
    """Thread B opens a kernel while the main thread is inside one, and ends after it:
    each schedule holds its own instructions (the main thread's went to B's), and this
    thread's intra-op thread count is its own again."""
    before = torch.get_num_threads()
    a = torch.randn(256, 64)
    _copy(a)
    alone = dict(_copy.last_schedule.instruction_counts)
    started, release = threading.Event(), threading.Event()
    result = {}

    def b() -> None:
        _blocking_copy(a, started, release)
        result["b"] = dict(_blocking_copy.last_schedule.instruction_counts)

    t = threading.Thread(target=b)

    @nki.jit
    def main_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t.start()
        assert started.wait(timeout=30)  # B is mid-kernel from here on
        nl.store(out[0:128, :], value=nl.load(x[0:128, :]))
        return out

    try:
        main_kernel(a)
    finally:
        release.set()
        t.join()
    assert dict(main_kernel.last_schedule.instruction_counts) == alone
    assert result["b"] == alone
    assert torch.get_num_threads() == before

"""The RNG higher-order ops of checkpointed graphs, run on the device's generator.

AOTAutograd traces a random op inside ``torch.utils.checkpoint`` as
``run_and_save_rng_state(op, *args)`` in the forward (the generator's state, then the
op's result) and ``run_with_rng_state(state, op, *args)`` in the backward (the op again
from that state), so the recomputation draws the forward's numbers. PyTorch implements
them for CPU, CUDA, HPU and XPU only. The backend runs graphs with them eagerly over
neuron tensors (``has_rng_hops``: prepare cannot functionalize them, and the saved
state has a symbolic size):
``to_device_generator`` swaps the two ops in it for plain functions that run the op on
the generator eager's random ops use, so the forward draws eager's numbers and the
backward redraws them. Plain functions rather than ``py_impl(NeuronTensor)`` rules:
AOTAutograd's first run goes through a dispatch mode that answers NotImplemented for a
higher-order op over a tensor subclass, which PyTorch then returns as the op's result.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

from torchneuron.device import NeuronTensor, random

__all__ = ["has_rng_hops", "to_device_generator"]


def _index(args: tuple, kwargs: dict) -> int:
    for a in (*args, *kwargs.values()):
        if isinstance(a, NeuronTensor):
            return a._device_index
    raise AssertionError("an RNG higher-order op dispatched to neuron without a neuron tensor")


def _save(op: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    return random.generator(_index(args, kwargs)).get_state(), op(*args, **kwargs)


def _with(state: torch.Tensor, op: Any, *args: Any, **kwargs: Any) -> Any:
    gen = random.generator(_index(args, kwargs))
    if isinstance(state, NeuronTensor):  # a saved state wrapped by the eager fallback
        state = state.cpu()
    current = gen.get_state()
    gen.set_state(state)
    try:
        return op(*args, **kwargs)
    finally:
        gen.set_state(current)


def has_rng_hops(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` saves or replays a generator state (the backward's saved state has
    a symbolic size, and prepare cannot functionalize either op: such graphs run eagerly)."""
    return any(n.op == "call_function" and n.target in (run_and_save_rng_state, run_with_rng_state)
               for n in gm.graph.nodes)


def to_device_generator(gm: torch.fx.GraphModule) -> None:
    """Make ``gm``'s RNG higher-order ops run on the device's generator (in place)."""
    rules = {run_and_save_rng_state: _save, run_with_rng_state: _with}
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in rules:
            node.target = rules[node.target]
            changed = True
    if changed:
        gm.recompile()

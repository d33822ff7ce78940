"""Verification of replays: a region's first replay also runs eagerly and is compared.

With the setting ``ae_verify_first_replay`` (on by default: adaptive eager swaps
executables in without the user asking, and a wrong lowering - such as the one Torch-MLIR's
importer made when it gave a bool constant a dead constant's values, see
``compiler/literal_tracker.py`` - must be refused on its first use) or ``verify`` on, the
first time a region's executable would run, its captured graph runs eagerly on clones of the same input
buffers and the same random state (``compiler.verify.run_verified``). Agreeing, the
executable's results are used and the region is trusted from then on. The comparison is
bit for bit: the reference is the op stream eager itself ran, on the same buffers, so it
gives eager's bits, and any difference (a last bit, a zero's sign) is a wrong replay
(it accepted float32 rounding once, which let replays off in the last bits through: a
small MLP's gradient product taken as a one-batch ``bmm``). Differing, the
mismatch is logged and counted (``compiler.stats()`` failure ``verify:verify-mismatch``),
the inputs, outputs and generator get eager's results, and the region is blacklisted
(``Reason.VERIFY_MISMATCH``): a wrong region never hands out a number.

With ``ae_verify_replays`` on (``TORCHNEURON_AE_VERIFY_REPLAYS=1``, off by default: it runs
every region twice), *every* replay is checked the same way, not only the first: for
debugging a user's divergence that appears only after many steps (an executable, a cached
one or a buffer it reads, that goes wrong later). The mismatch names the replay, the region
and the op nearest the first differing value, in the log and in ``explain()``; the region is
blacklisted and that replay hands out eager's numbers.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.verify import run_verified, verify_enabled
from torchneuron.device import random
from torchneuron.dispatch.rnn import FUSED_CELL_KERNELS
from torchneuron.hardware.settings import get_value

__all__ = ["run_checked", "reference_raised"]

log = logging.getLogger("torchneuron.adaptive_eager.verify")

_REFERENCE_RAISED = "_torchneuron_ae_reference_raised"


def reference_raised(error: BaseException) -> bool:
    """Whether ``error`` came from the eager reference run of a region's first replay
    (an out-of-range index, say): it ran on clones and the executable never ran, so the
    inputs are unchanged and the replay can run its deferred ops eagerly instead."""
    return bool(getattr(error, _REFERENCE_RAISED, False))


def run_checked(region: Any, inputs: list[torch.Tensor],
                run: Callable[[list[torch.Tensor]], list[Any]], index: int) -> list[Any]:
    """``run(inputs)``, checked against the region's graph on its first run when the
    ``verify`` setting is on (on every run with ``ae_verify_replays``, read when a region
    is first checked, so set it before the loop starts). Sets
    ``region.mismatch`` when the two differ. A run that raises leaves the region to be
    verified next time."""
    if region.verified or region.graph is None or not (
            verify_enabled() or get_value("ae_verify_first_replay")
            or get_value("ae_verify_replays")):
        return run(inputs)
    # checked: trusted from now on (the default path reads one attribute per replay),
    # unless every replay is to be checked
    region.verified = not get_value("ae_verify_replays")
    region.checked_replays += 1
    gen = random.generator(index)
    ran: list[bool] = []

    def run_once(args: list[torch.Tensor]) -> list[Any]:
        ran.append(True)
        return run(args)

    try:
        outs, mismatch = run_verified(f"region_{region.key}", _reference(region.graph), inputs,
                                      run_once, get_rng_state=gen.get_state,
                                      set_rng_state=gen.set_state, source="adaptive_eager",
                                      exact=True)
    except Exception as e:
        region.verified = False  # not compared: next time
        region.checked_replays -= 1
        if not ran:  # the reference raised (on clones): the executable did not run
            setattr(e, _REFERENCE_RAISED, True)
        raise
    if mismatch is not None:
        nth = region.checked_replays
        mismatch.detail = "; ".join(filter(None, [
            mismatch.detail, f"checked replay {nth} of region {region.key}"
            + (" (its first)" if nth == 1 else
               " (the earlier ones agreed with eager; TORCHNEURON_AE_VERIFY_REPLAYS)")]))
        log.warning("adaptive eager: region %s diverged from eager at its checked replay %d; "
                    "blacklisted: %s", region.key, nth, mismatch)
    region.mismatch = mismatch
    return outs


def _reference(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` as eager runs it on the buffers: ops the CPU lacks (the fused RNN cells)
    call the device's own implementation."""
    if not any(n.op == "call_function" and n.target in FUSED_CELL_KERNELS
               for n in gm.graph.nodes):
        return gm
    ref = fx.GraphModule(gm, copy.deepcopy(gm.graph))
    for node in ref.graph.nodes:
        if node.op == "call_function" and node.target in FUSED_CELL_KERNELS:
            node.target = FUSED_CELL_KERNELS[node.target]
    ref.recompile()
    return ref

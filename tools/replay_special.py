"""The special-value variants of ``tools/replay_sweep.py ops`` (``--dtypes``, ``--variants``).

Why apart: the replay sweep's own module stays about running a sample under replay; this
one says which samples it runs: the ops' samples in other dtypes than float32, with
``tools/special_sweep.py``'s special values (NaN, +-inf, -0 and subnormals, the dtype's
maximum, halfway values) written into their float tensors, as that sweep writes them.
"""

from __future__ import annotations

from typing import Any

import torch
from opinfo_device import _Mover, _samples
from special_sweep import DTYPES, HALF_VARIANTS, inject

__all__ = ["RUN_DTYPES", "RUN_VARIANTS", "Injector", "cases", "made"]

SEED = 0
# (--dtypes, --variants) the dtypes of the ops' samples and the special values written in;
# replay_sweep's main sets them in place
RUN_DTYPES = ["float32"]
RUN_VARIANTS = ["plain"]


class Injector:
    """A sample's float tensors with ``variant``'s special values written in (as
    ``tools/special_sweep.py`` writes them; aliases stay aliases)."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.memo: dict[int, torch.Tensor] = {}

    def __call__(self, x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in self.memo:
            k = len(self.memo)
            self.memo[id(x)] = inject(x.detach().cpu(), self.variant, k).to(x.device)
        return self.memo[id(x)]


def made(op: Any, dtype: torch.dtype) -> list[Any]:
    """The op's samples in ``dtype``, made on ``neuron`` (as ``opinfo_device._samples``)."""
    if dtype == torch.float32:
        return _samples(op, False)
    made = list(op.sample_inputs("neuron", dtype, requires_grad=False))
    if made:
        return made
    torch.manual_seed(SEED)
    to_device = _Mover()
    return [s.transform(to_device) for s in op.sample_inputs("cpu", dtype, requires_grad=False)]


def cases(dname: str) -> list[str]:
    """The special-value variants run in dtype ``dname`` (as ``tools/special_sweep.py``)."""
    dtype = DTYPES[dname]
    if not dtype.is_floating_point:
        return [v for v in RUN_VARIANTS if v in ("plain", "int")]
    return [v for v in RUN_VARIANTS if v != "int"
            and (dtype in (torch.float32, torch.float64) or v in HALF_VARIANTS)]

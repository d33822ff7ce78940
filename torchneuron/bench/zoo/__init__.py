"""The benchmark model zoo: real workloads written as ordinary PyTorch.

Each module defines one ``WORKLOAD``; ``ZOO`` lists them in report order. A workload's
code knows nothing of torchneuron beyond the device string it is built on, so the same
code runs on ``"cpu"`` (the host-cost reference) and on ``"neuron"`` in every mode. The
one exception is ``gpt_nki``, whose point is torchneuron's custom kernels
(``torchneuron.nki.lib``, which compute the same numbers on ``"cpu"``).
"""

from __future__ import annotations

import importlib.util

from . import cnn, decode, encoder, gpt, gpt_nki, gpt_wide, hf_gpt2, mlp, rnn
from ._task import Task, TrainTask, Workload

__all__ = ["ZOO", "Task", "TrainTask", "Workload", "get", "missing_requirements"]

ZOO: dict[str, Workload] = {
    w.name: w
    for w in (mlp.WORKLOAD, cnn.WORKLOAD, gpt.WORKLOAD, rnn.WORKLOAD, decode.WORKLOAD,
              encoder.WORKLOAD, hf_gpt2.WORKLOAD, gpt_wide.WORKLOAD, gpt_nki.WORKLOAD)
}


def get(name: str) -> Workload:
    """The workload called ``name``; a KeyError lists the valid names."""
    try:
        return ZOO[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; the zoo has: {', '.join(ZOO)}") from None


def missing_requirements(workload: Workload) -> list[str]:
    """Optional packages ``workload`` needs that are not installed."""
    return [m for m in workload.requires if importlib.util.find_spec(m) is None]

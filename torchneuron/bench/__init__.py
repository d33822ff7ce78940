"""``torchneuron.bench``: eager vs adaptive eager vs torch.compile on the simulated hardware.

The top layer: a model zoo of ordinary PyTorch workloads (``zoo``), the modes they run in
(``modes``), one process per (model, mode) (``_pool``, ``runner``), the figures derived
from the runtime's own clock and counters (``metrics``), whether an adaptive run meets
issue 20's whole-run criteria (``criteria``), and the reports (``report``, ``chart``); ``torchneuron-bench`` is the command line (``cli``). Calls into adaptive eager
and the compile cache are all in ``_runtime``. ``--nproc N``: data-parallel training on
ranks started by torchrun (``dist_suite`` launches and merges, ``dist_rank`` is one rank,
``dist_report`` writes the report).
"""

from torchneuron.bench.modes import MODES
from torchneuron.bench.schema import FIELDS, SIMULATED, validate
from torchneuron.bench.suite import run_suite
from torchneuron.bench.zoo import ZOO

__all__ = ["FIELDS", "MODES", "SIMULATED", "ZOO", "run_suite", "validate"]

"""The compiler's settings rows, declared in the one settings table (``hardware/settings.py``).

Why here: a knob belongs to the package that reads it, so the compiler declares its own
rows; the table, parsing and warnings stay at the bottom layer. Imported first by
``torchneuron/compiler/__init__.py``, so every row exists before any compiler module
reads it (``settings.get_value("dump_dir")`` and so on).

The three debugging switches are ``live``: read from the environment at every use, as
they were before they joined the table, so setting one while the process runs (a test's
``monkeypatch.setenv``, a script's ``os.environ``) takes effect at the next compile.

================================  =======  ================================================
environment variable              default  meaning
================================  =======  ================================================
TORCHNEURON_VERIFY                0        "1" checks each new compiled graph's first run
                                           against eager (compiler/verify.py)
TORCHNEURON_DUMP_DIR              (unset)  write every compilation's artifacts there
                                           (compiler/dump.py)
TORCHNEURON_COMPILE_IN_PROCESS    0        anything but "" or "0" lowers in this process,
                                           not in the worker (compiler/worker.py)
TORCHNEURON_COMPILE_TIMEOUT       300      seconds a worker call may take before the worker
                                           is killed (compiler/worker.py)
================================  =======  ================================================
"""

from __future__ import annotations

from torchneuron.hardware.settings import Setting, declare, parse_bool

__all__ = ["ROWS"]


def _parse_set(text: str) -> bool:
    """Set unless empty or ``"0"`` (the worker's rule since it first read the variable)."""
    return text not in ("", "0")


ROWS: tuple[Setting, ...] = (
    Setting("verify", "TORCHNEURON_VERIFY", False, parse_bool,
            "run each newly compiled graph once eagerly too and refuse it if outputs differ"),
    Setting("dump_dir", "TORCHNEURON_DUMP_DIR", "", str,
            "write every compilation's FX graph, StableHLO, program, cost and executable "
            "into a folder here ('' = off)", live=True),
    Setting("compile_in_process", "TORCHNEURON_COMPILE_IN_PROCESS", False, _parse_set,
            "lower in this process instead of the crash-isolating worker (for pdb)",
            live=True),
    Setting("compile_timeout", "TORCHNEURON_COMPILE_TIMEOUT", 300.0, float,
            "seconds a compile step may take in the worker before it is killed", live=True),
)

declare(*ROWS)

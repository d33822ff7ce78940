"""worker: run lowering (or any compile step) in a warm child process.

torch-mlir segfaulted the whole process on two OpInfo samples while we planned this, and a
compiler crash must never end the user's program (DESIGN.md section 5). So compile steps
run in one persistent child (persistent: starting Python and importing torch + torch_mlir
costs seconds). A dead child becomes a `WorkerCrash` naming the signal, and the next call
starts a new one; a call that exceeds its timeout kills the child (`WorkerTimeout`).

Why not `ProcessPoolExecutor(mp_context=spawn)`: spawn re-runs the user's ``__main__``
script in the child, which breaks (or re-executes) every training script without an
``if __name__ == "__main__"`` guard. We start ``python -c`` ourselves instead and speak a
tiny length-prefixed pickle protocol over pipes (the child's stdout is moved to stderr so
library prints cannot corrupt it). Pickle is fine here: it is IPC inside our own process
tree, never a cache entry. Pickling a GraphModule drops node metadata, so example inputs
travel as (shape, stride, dtype) specs and the child re-runs fake-tensor propagation.

``TORCHNEURON_COMPILE_IN_PROCESS=1`` (or ``in_process=True``) runs everything in the
calling process, for debugging with pdb. ``TORCHNEURON_COMPILE_TIMEOUT`` sets the default
timeout in seconds (300).
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.errors import WorkerCrash, WorkerTimeout
from torchneuron.hardware import settings

__all__ = ["run_in_worker", "lower_in_worker", "warm_up", "shutdown", "in_process_default",
           "default_timeout", "resolve"]

_HEADER = struct.Struct("<Q")
_lock = threading.Lock()
_proc: subprocess.Popen[bytes] | None = None


def in_process_default() -> bool:
    return bool(settings.get_value("compile_in_process"))  # TORCHNEURON_COMPILE_IN_PROCESS


def default_timeout() -> float:
    return float(settings.get_value("compile_timeout"))  # TORCHNEURON_COMPILE_TIMEOUT


def resolve(path: str) -> Any:
    """``"pkg.mod:func"`` or ``"pkg.mod.func"`` -> the function object."""
    if ":" in path:
        mod, _, attr = path.partition(":")
    else:
        mod, _, attr = path.rpartition(".")
    obj: Any = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


# ----------------------------------------------------------------------------- child side


def _serve() -> None:
    """Child main loop: read (path, args), answer (ok, result-or-exception), forever."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, not into the protocol
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    import torch_mlir.fx  # noqa: F401  (warm: the expensive import, before the first job)

    import torchneuron.compiler.prepare.custom_calls  # noqa: F401  (defines the carrier ops graphs name)

    while True:
        head = inp.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return  # parent closed the pipe: exit quietly
        body = inp.read(_HEADER.unpack(head)[0])
        try:
            try:
                path, args = pickle.loads(body)
            except Exception as e:  # e.g. a graph calling an op registered only in the parent
                raise WorkerCrash(f"the worker could not unpickle the request: {e}. Expected "
                                  "only ops and functions importable in a fresh process.",
                                  reason="bad-request") from None
            reply = (True, resolve(path)(*args))
            data = pickle.dumps(reply)
        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
            try:
                data = pickle.dumps((False, e))
            except Exception:
                data = pickle.dumps((False, RuntimeError(f"{type(e).__name__}: {e}")))
        try:
            out.write(_HEADER.pack(len(data)) + data)
            out.flush()
        except BrokenPipeError:
            return  # the parent is gone (it exited mid-request): nobody to answer


# ----------------------------------------------------------------------------- parent side


def _start() -> subprocess.Popen[bytes]:
    code = (f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
            "from torchneuron.compiler.lower.worker import _serve; _serve()")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, close_fds=True)


def _kill(proc: subprocess.Popen[bytes]) -> int | None:
    if proc.poll() is None:
        proc.kill()
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def _read_exact(proc: subprocess.Popen[bytes], n: int, deadline: float) -> bytes | None:
    """Read n bytes from the child; None on EOF (crash); raise TimeoutError at deadline."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def warm_up() -> None:
    """Start the worker now (e.g. when a background compile is likely soon)."""
    run_in_worker("builtins:int", in_process=False)


def shutdown() -> None:
    """Stop the worker; registered at exit so the interpreter exits cleanly."""
    global _proc
    with _lock:
        proc, _proc = _proc, None
    if proc is not None:
        assert proc.stdin is not None
        try:
            proc.stdin.close()  # the child exits on EOF
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            _kill(proc)
        if proc.stdout is not None:
            proc.stdout.close()


atexit.register(shutdown)


def run_in_worker(fn_dotted_path: str, *args: Any, timeout: float | None = None,
                  in_process: bool | None = None) -> Any:
    """Call the function at ``fn_dotted_path`` with ``args`` (picklable) in the worker.

    Exceptions raised by the function come back unchanged (CompileErrors keep their
    fields). A dead worker raises `WorkerCrash`; a timeout raises `WorkerTimeout`; in both
    cases the next call gets a fresh worker. Calls are serialized (one worker).
    """
    global _proc
    if in_process is None:
        in_process = in_process_default()
    if in_process:
        return resolve(fn_dotted_path)(*args)
    timeout = default_timeout() if timeout is None else timeout
    payload = pickle.dumps((fn_dotted_path, args))
    with _lock:
        if _proc is None or _proc.poll() is not None:
            _proc = _start()
        proc = _proc
        assert proc.stdin is not None
        deadline = time.monotonic() + timeout
        try:
            proc.stdin.write(_HEADER.pack(len(payload)) + payload)
            proc.stdin.flush()
            head = _read_exact(proc, _HEADER.size, deadline)
            body = None if head is None else _read_exact(proc, _HEADER.unpack(head)[0], deadline)
        except TimeoutError:
            _kill(proc)
            _proc = None
            raise WorkerTimeout(
                f"{fn_dotted_path} did not finish within {timeout:.0f}s; the worker was "
                "killed. Raise TORCHNEURON_COMPILE_TIMEOUT for very large graphs.",
                reason="worker-timeout") from None
        except BrokenPipeError:
            body = None
        if body is None:
            try:
                code: int | None = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = _kill(proc)
            _proc = None
            how = (f"killed by signal {-code}" if code is not None and code < 0
                   else f"exited with code {code}")
            raise WorkerCrash(
                f"the compile worker died while running {fn_dotted_path} ({how}). This is "
                "a crash in the lowering library, not in your program; the region falls "
                "back to eager and a new worker serves the next compile. Set "
                "TORCHNEURON_COMPILE_IN_PROCESS=1 to reproduce it in-process.",
                reason="worker-crashed")
    ok, value = pickle.loads(body)
    if ok:
        return value
    raise value


def _specs(gm: fx.GraphModule, example_inputs: Sequence[Any] | None) -> list[tuple[Any, ...]]:
    if example_inputs is None:
        example_inputs = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    return [(tuple(t.shape), tuple(t.stride()), t.dtype) for t in example_inputs]


def _picklable(gm: fx.GraphModule) -> fx.GraphModule:
    """A plain GraphModule with the same graph: make_fx's tracer class (recorded on the
    module) cannot re-trace the code when the module is unpickled."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, graph)


def _lower_from_specs(gm: fx.GraphModule, specs: list[tuple[Any, ...]]) -> str:
    from torchneuron.compiler.lower.importer import lower_to_stablehlo

    inputs = [torch.empty_strided(shape, stride, dtype=dtype) for shape, stride, dtype in specs]
    return lower_to_stablehlo(gm, inputs)


def lower_in_worker(gm: fx.GraphModule, example_inputs: Sequence[Any] | None = None, *,
                    timeout: float | None = None, in_process: bool | None = None) -> str:
    """`lower.lower_to_stablehlo` in the worker; returns the StableHLO text."""
    if in_process or (in_process is None and in_process_default()):
        from torchneuron.compiler.lower.importer import lower_to_stablehlo

        return lower_to_stablehlo(gm, example_inputs)
    return run_in_worker("torchneuron.compiler.lower.worker:_lower_from_specs", _picklable(gm),
                         _specs(gm, example_inputs), timeout=timeout, in_process=False)

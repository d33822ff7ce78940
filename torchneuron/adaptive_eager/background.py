"""Background compilation: the one place adaptive eager calls ``compile_graph``.

The real compile runs on one worker thread (its lowering runs in the compiler's worker
process), so the program keeps running eagerly. *When* its executable may be used is
decided on the simulated clock by the caller (the region's modeled latency on the
timeline's compiler queue); ``wait`` blocks the main thread only if the real compile is
later than that simulated moment, and returns the wall-clock stall it caused.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from torchneuron.cache import default_store
from torchneuron.compiler.keys import fx_graph_key
from torchneuron.compiler.pipeline import compile_graph, load_cached
from torchneuron.compiler.prepare.trace_lock import wait_for

__all__ = ["caching", "compiled_now", "drain", "lookup", "submit", "wait", "shutdown"]

_executor: ThreadPoolExecutor | None = None


def _graph_key(gm: torch.fx.GraphModule, examples: list[torch.Tensor]) -> str | None:
    # The captured graph itself (ops, constants, input metadata), not the region's
    # signature: two regions can only share an executable if their graphs are the same.
    return fx_graph_key(gm, examples)


def lookup(gm: torch.fx.GraphModule, examples: list[torch.Tensor], key: str) -> Any:
    """The region's executable from the compile cache (this or an earlier process), or None.

    A hit compiles nothing, so the region is ready at once and costs no compile latency.
    Raises the ``CompileError`` of an earlier compile of the same graph that failed, when
    the cache remembers one: the region is refused at once, not compiled again.
    """
    return load_cached(default_store(), _graph_key(gm, examples), name=f"region_{key}",
                       source="adaptive_eager")


def _compile(gm: torch.fx.GraphModule, examples: list[torch.Tensor], key: str) -> Any:
    return compile_graph(gm, examples, name=f"region_{key}", source="adaptive_eager",
                         store=default_store(), graph_key=_graph_key(gm, examples))


def submit(gm: torch.fx.GraphModule, examples: list[torch.Tensor], key: str) -> Future:
    """Start compiling region ``key`` off the main thread."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchneuron-ae-compile")
    return _executor.submit(_compile, gm, examples, key)


def compiled_now(gm: torch.fx.GraphModule, examples: list[torch.Tensor], key: str) -> Future:
    """Compile region ``key`` on this thread; its result as a finished future."""
    future: Future = Future()
    try:
        future.set_result(_compile(gm, examples, key))
    except Exception as e:  # noqa: BLE001 - handed to ``wait`` as a compile error
        future.set_exception(e)
    return future


def caching() -> bool:
    """Whether a compile cache keeps what is compiled (for this and later processes)."""
    return default_store() is not None


def wait(future: Future) -> tuple[Any, BaseException | None, float]:
    """(executable or None, the compile error or None, wall seconds the caller waited)."""
    t0 = time.perf_counter()
    try:
        exe = wait_for(future)  # the caller may hold the trace lock (a ``cond``)
        err = None
    except Exception as e:  # a CompileError, or anything else: refuse the region
        exe, err = None, e
    return exe, err, time.perf_counter() - t0


def drain() -> None:
    """Wait until every compile submitted so far has finished (their results are kept).

    ``disable()`` calls it: after adaptive eager stops, the program's own ``torch.compile``
    must not meet a region still tracing here (FX's tracing flag is process-wide).
    """
    if _executor is not None:
        wait_for(_executor.submit(lambda: None))  # one worker, first in first out


def shutdown() -> None:
    global _executor
    if _executor is not None:
        _executor.shutdown(wait=True, cancel_futures=True)
        _executor = None

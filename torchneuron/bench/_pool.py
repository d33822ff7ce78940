"""Run each (model, mode) in a fresh process, cheaply: lanes that fork one child per run.

Why a fresh process per run: the simulated clock, the cores' compiled-signature sets,
Dynamo's caches, compiler statistics, the compile cache's in-memory tier and adaptive
eager's regions are all process-wide. A fresh process gives every run a clean state
without trusting each layer's ``reset()``, makes a run's figures independent of which
runs came before it (so they reproduce), turns a crash of one run into a reported
"crashed" instead of the end of the report, and makes "warm cache" mean what users see:
a second process finding the first one's executables on disk.

Why fork: starting Python and importing torch costs seconds per process. The parent
imports everything once; for each run one of ``jobs`` lanes (forked from it) forks a
child that inherits the imports, starts its own compile worker when it compiles, runs,
writes its record to a file and exits. Lanes run in parallel; the children of one lane
run one after another. (Children once shared their lane's warm worker: a reply left in
its pipe by one child's cut-off background compile was read by the next child.)
Where ``os.fork`` does not exist, each run is a new ``python -m torchneuron.bench.runner``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

__all__ = ["run_all"]

Record = dict[str, Any]


def _forget_parent_worker() -> None:
    """In a forked child, never talk to the lane's compile worker: start a new one.

    The child inherits the worker's pipes, but a request an earlier child left unanswered
    (an adaptive-eager background compile cut off by that child's exit) leaves its reply
    in the pipe, and the next child would read it as the answer to its own request: a
    failed compile at best, another graph's executable at worst. A worker of its own
    costs the child a start-up, never a wrong number.
    """
    from torchneuron.compiler.lower import worker

    worker._proc = None  # the parent's worker stays the parent's; a new one starts on use


def _fork_one(spec: dict[str, Any], timeout: float) -> Record | None:
    """Fork a child for ``spec``; return its record, or None if it left none."""
    from torchneuron.bench.runner import run_one

    record_path = Path(spec["record_path"])
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            _forget_parent_worker()
            record_path.write_text(json.dumps(run_one(spec), default=str))
        except BaseException:  # noqa: BLE001 - a child must never return into the lane
            code = 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    status = None
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return _failed(spec, "timeout", f"no result within {timeout:.0f} s; killed")
        else:
            time.sleep(0.05)
    if record_path.exists():
        return json.loads(record_path.read_text())
    if os.WIFSIGNALED(status):
        how = f"killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        how = f"exited with code {os.WEXITSTATUS(status)}"
    return _failed(spec, "crashed", f"the benchmark process {how} without a result")


def _failed(spec: dict[str, Any], status: str, reason: str) -> Record:
    from torchneuron.bench.schema import empty_record

    rec = empty_record(spec["model"], spec["mode"])
    rec.update(status=status, reason=reason, hardware=spec["hardware"], steps=0)
    return rec


def _lane(conn: Connection, timeout: float) -> None:
    """A lane: fork one child per spec received, one after another (each child starts its
    own compile worker, see ``_forget_parent_worker``)."""
    while True:
        spec = conn.recv()
        if spec is None:
            break
        conn.send(_fork_one(spec, timeout))


def _spawn_one(spec: dict[str, Any], timeout: float) -> Record:
    """No fork: one fresh interpreter per run."""
    spec_path = Path(spec["record_path"]).with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec))
    try:
        subprocess.run([sys.executable, "-m", "torchneuron.bench.runner", str(spec_path)],
                       timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return _failed(spec, "timeout", f"no result within {timeout:.0f} s; killed")
    path = Path(spec["record_path"])
    if path.exists():
        return json.loads(path.read_text())
    return _failed(spec, "crashed", "the benchmark process exited without a result")


def _resolve(spec: dict[str, Any], results: dict[tuple[str, str], Record]
             ) -> dict[str, Any] | Record:
    """The spec to send: ``steps_from`` (``--steps auto``) takes the steps its model's
    pacer run made. When that run made none (it failed or timed out), the step count is
    unknown: a "not run" record saying so, rather than a guess."""
    spec = {k: v for k, v in spec.items() if k != "_index"}
    src = spec.get("steps_from")
    if src is not None:
        pacer = results.get((spec["model"], src)) or {}
        if not pacer.get("steps"):
            return _failed(spec, "not run", f"--steps auto: the {src} run that sets the steps "
                           f"ended {pacer.get('status', 'without a record')} with no step")
        spec["steps"] = int(pacer["steps"])
    return spec


def _is_record(x: dict[str, Any]) -> bool:
    return "status" in x


def _ready(pending: list[dict[str, Any]], done: set[tuple[str, str]]) -> Iterator[int]:
    for i, spec in enumerate(pending):
        dep = spec.get("after")
        if dep is None or (spec["model"], dep) in done:
            yield i


def run_all(specs: list[dict[str, Any]], jobs: int, timeout: float,
            on_done: Callable[[Record], None]) -> list[Record]:
    """Run every spec (a spec with ``after`` = mode waits for that mode of its model);
    call ``on_done`` as each finishes; return the records in the order of ``specs``."""
    results: dict[int, Record] = {}
    by_key: dict[tuple[str, str], Record] = {}
    pending = [dict(s, _index=i) for i, s in enumerate(specs)]
    done: set[tuple[str, str]] = set()
    if not hasattr(os, "fork"):
        while pending:
            spec = pending.pop(next(_ready(pending, done)))
            sent = _resolve(spec, by_key)
            rec = results[spec["_index"]] = sent if _is_record(sent) else _spawn_one(sent,
                                                                                  timeout)
            by_key[(spec["model"], spec["mode"])] = rec
            done.add((spec["model"], spec["mode"]))
            on_done(rec)
        return [results[i] for i in range(len(specs))]
    ctx = multiprocessing.get_context("fork")
    lanes: list[tuple[Any, Connection]] = []
    for _ in range(max(1, min(jobs, len(specs)))):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_lane, args=(child, timeout), daemon=True)
        proc.start()
        lanes.append((proc, parent))
    busy: dict[Connection, dict[str, Any]] = {}
    try:
        while pending or busy:
            for _proc, conn in lanes:
                while conn not in busy and pending:
                    ready = next(_ready(pending, done), None)
                    if ready is None:
                        break
                    spec = pending.pop(ready)
                    sent = _resolve(spec, by_key)
                    if _is_record(sent):  # nothing to run: its record is the answer
                        results[spec["_index"]] = by_key[(spec["model"], spec["mode"])] = sent
                        done.add((spec["model"], spec["mode"]))
                        on_done(sent)
                        continue
                    busy[conn] = spec
                    conn.send(sent)
            if not busy and not pending:
                break
            if not busy:  # every lane died: the rest cannot run
                for spec in pending:
                    results[spec["_index"]] = _failed(spec, "crashed", "no benchmark lane left")
                    on_done(results[spec["_index"]])
                pending.clear()
                break
            for conn in wait(list(busy)):
                spec = busy.pop(conn)  # type: ignore[arg-type]
                try:
                    rec = conn.recv()  # type: ignore[union-attr]
                except EOFError:
                    rec = _failed(spec, "crashed", "the benchmark lane died")
                    lanes = [lane for lane in lanes if lane[1] is not conn]
                results[spec["_index"]] = by_key[(spec["model"], spec["mode"])] = rec
                done.add((spec["model"], spec["mode"]))
                on_done(rec)
    finally:
        for _proc, conn in lanes:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc, _conn in lanes:
            proc.join(timeout=15)
            if proc.is_alive():
                proc.kill()
    return [results[i] for i in range(len(specs))]

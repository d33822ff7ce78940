"""One entry point from an FX graph to an executable: the neuron lowering path.

    capture (FX graph) -> prepare -> Torch-MLIR -> StableHLO -> neuron compiler -> executable

``prepare`` runs in the calling process (it needs the live callable); everything
from the Torch-MLIR import on runs in a worker process, so a crash in a lowering
library is a counted compile failure, never the end of the user's program. Three
separate steps after prepare: lower in the worker (``lower_graph``), key on the
StableHLO text (``keys.executable_key``), neuronc in the worker (``run_neuronc``);
with a store (``store.ExecutableStore``) the key is looked up before neuronc, and a
graph key is looked up before anything. torch.compile and adaptive eager both
compile through ``compile_graph``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils._pytree import treespec_dumps

from torchneuron.compiler import dump, executable, stats, versions
from torchneuron.compiler.errors import (
    CaptureError,
    CompileError,
    LoweringError,
    NeuronCompileError,
    PrepareError,
)
from torchneuron.compiler.executable import Executable, ExecutableFormatError
from torchneuron.compiler.keys import executable_key, index_key
from torchneuron.compiler.prepare.graph import PreparedGraph, prepare
from torchneuron.compiler.store import ExecutableStore
from torchneuron.hardware import current_profile, get_profile

__all__ = ["compile_graph", "load_cached", "lower_and_compile", "lower_graph", "run_neuronc"]


@contextlib.contextmanager
def _stage(key: str, what: str, seconds: dict[str, float], *, stage: str | None = None,
           reason: str | None = None) -> Iterator[None]:
    """Time one stage into ``seconds[key]``, and make any failure in it a typed one.

    A ``CompileError`` passes through as raised; anything else becomes a
    ``CompileError`` naming the stage (``stage``, default ``key``), so the caller can
    fall back and count the reason.
    """
    t0 = time.perf_counter()
    try:
        yield
    except CompileError:
        raise
    except Exception as e:
        raise CompileError(f"{what} failed: {type(e).__name__}: {e}", stage=stage or key,
                           op=getattr(e, "op", None), reason=reason or type(e).__name__) from e
    seconds[key] = time.perf_counter() - t0


def lower_graph(gm: Any, input_specs: list[tuple[Any, ...]]) -> dict[str, Any]:
    """Torch-MLIR import -> StableHLO text. Runs in the worker (a crash there is contained).

    ``input_specs`` are (shape, stride, dtype) of the prepared graph's placeholders.
    """
    import torch

    from torchneuron.compiler.lower.importer import lower_to_stablehlo

    seconds: dict[str, float] = {}
    with _stage("lower", "the Torch-MLIR import", seconds):
        example_inputs = [torch.empty_strided(shape, stride, dtype=dtype)
                          for shape, stride, dtype in input_specs]
        text = lower_to_stablehlo(gm, example_inputs)
    return {"stablehlo": text, "seconds": seconds}


def run_neuronc(text: str, target: str, options: dict[str, Any]) -> dict[str, Any]:
    """StableHLO text -> parse -> the neuron compiler. Runs in the worker.

    Returns JSON-safe data only: the program (which holds the parsed, folded IR), the
    StableHLO op count and the seconds each stage took.
    """
    from torchneuron.compiler.neuronc import compile_module
    from torchneuron.compiler.stablehlo import parse_module

    seconds: dict[str, float] = {}
    with _stage("parse", "reading the StableHLO module", seconds, stage="neuronc",
                reason="parse-failed"):
        module = parse_module(text)
    with _stage("neuronc", "the neuron compiler", seconds):
        program = compile_module(module, get_profile(target), options)
    return {
        "program": program.to_dict(),
        "num_ops": len(module.functions[module.entry].body),
        "seconds": seconds,
    }


def lower_and_compile(gm: Any, input_specs: list[tuple[Any, ...]], target: str,
                      options: dict[str, Any]) -> dict[str, Any]:
    """``lower_graph`` then ``run_neuronc`` in one call (one worker round trip)."""
    lowered = lower_graph(gm, input_specs)
    compiled = run_neuronc(lowered["stablehlo"], target, options)
    return {"stablehlo": lowered["stablehlo"], "program": compiled["program"],
            "num_ops": compiled["num_ops"],
            "seconds": {**lowered["seconds"], **compiled["seconds"]}}


def _placeholder_values(prepared: PreparedGraph) -> list[Any]:
    return [n.meta["val"] for n in prepared.gm.graph.nodes if n.op == "placeholder"]


def _signature(prepared: PreparedGraph, num_ops: int | None) -> dict[str, Any]:
    def spec(s: Any) -> dict[str, Any]:
        return {"shape": list(s.shape), "stride": list(s.stride), "dtype": str(s.dtype)}

    checks = {"error_checks": [[c.output, c.api, c.is_matrix] for c in prepared.error_checks]} \
        if prepared.error_checks else {}  # absent otherwise: other graphs' keys stay as they were
    if prepared.index_checks:
        checks["index_checks"] = [c.to_list() for c in prepared.index_checks]
    if prepared.complex_inputs or prepared.complex_outputs:  # (absent otherwise, as above)
        checks["complex_inputs"] = list(prepared.complex_inputs)
        checks["complex_outputs"] = list(prepared.complex_outputs)
    return {
        **checks,
        "num_user_inputs": prepared.num_user_inputs,
        "num_user_outputs": prepared.num_user_outputs,
        "inputs": [spec(s) for s in prepared.input_specs],
        "outputs": [spec(s) for s in prepared.output_specs],
        "write_backs": [list(wb) for wb in prepared.write_backs],
        "random_inputs": [r.to_dict() for r in prepared.random_inputs],
        "user_outputs": [
            {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(u).items()}
            for u in prepared.user_outputs
        ],
        "out_tree": treespec_dumps(prepared.out_tree) if prepared.out_tree is not None else None,
        "num_stablehlo_ops": num_ops,
    }


def _load_cached(store: ExecutableStore, key: str | None, name: str,
                 example_inputs: Sequence[Any] | None = None) -> Executable | None:
    """The executable saved under ``key``, renamed for this caller; None on a miss.

    Bytes that are not what their key names (``executable.check_entry``: content
    addressing), or (through a graph-key link) were built for other inputs, are a
    counted miss: the store drops them (``discard``, if it has one) and the caller
    compiles and saves over them.
    """
    if key is None:
        return None
    data = store.load(key)
    if data is None:
        return None
    try:
        exe = executable.check_entry(data, key)
    except ExecutableFormatError as e:
        warnings.warn(f"torchneuron: cached executable {key[:12]} does not load ({e}); "
                      "recompiling it", stacklevel=3)
        stats.record_cache("corrupt")
        discard = getattr(store, "discard", None)
        if discard is not None:
            discard(key)
        return None
    if example_inputs is not None and not executable.matches_inputs(exe, example_inputs):
        # The executable is intact; the link to it is wrong (compiling relinks it).
        warnings.warn(f"torchneuron: cached executable {key[:12]} was built for other "
                      "inputs (a graph-key link to another graph's executable); "
                      "recompiling", stacklevel=3)
        stats.record_cache("corrupt")
        return None
    exe.name, exe.cache_key, exe.from_cache = name, key, True
    return exe


# errors of the graph itself, the same in every process: a stage's typed refusal that
# names the op to blame (not a worker's crash or time-out, the machine's, nor an
# unexpected exception a stage wrapped, which could be the process's state)
_REMEMBERED_STAGES = ("capture", "prepare", "lower", "neuronc")
_ERRORS = {cls.default_stage: cls for cls in (CaptureError, PrepareError, LoweringError,
                                               NeuronCompileError)}


def _known_failure(store: ExecutableStore, ikey: str, source: str) -> None:
    """Raise the compile error ``store`` remembers for ``ikey`` (an earlier process's or
    this one's), counted as a failure of ``source``; return if it remembers none."""
    failure = getattr(store, "failure", None)
    record = failure(ikey) if failure is not None else None
    if record is None:
        return
    stage = record["stage"] if record["stage"] in _ERRORS else "prepare"
    message = (f"{record['message']} (a failure the compile cache remembers from an earlier "
               "compile of this graph; set TORCHNEURON_CACHE_RETRY_FAILED=1 to compile it "
               "again)")
    stats.record_failure(source, stage, record["reason"], message)
    raise _ERRORS[stage](message, stage=stage, op=record["op"], reason=record["reason"])


def _remember_failure(store: ExecutableStore | None, ikey: str | None, e: CompileError) -> None:
    remember = getattr(store, "remember_failure", None)
    if remember is not None and ikey is not None and e.stage in _REMEMBERED_STAGES \
            and e.op is not None:
        remember(ikey, {"stage": e.stage, "reason": e.reason, "op": e.op,
                        "message": e._message()})


def load_cached(store: ExecutableStore | None, graph_key: str | None, *, name: str = "graph",
                target: str | None = None, options: dict[str, Any] | None = None,
                source: str = "api") -> Executable | None:
    """The executable ``store`` holds for ``graph_key``, or None: a look-up that compiles
    nothing, so a caller can tell a warm cache (ready now) from a compile (later). Raises
    the ``CompileError`` of an earlier compile of the graph that failed, if the store
    remembers one (so the caller does not compile it again)."""
    if store is None or not graph_key:
        return None
    ikey = index_key(graph_key, target or current_profile().name, dict(options or {}))
    _known_failure(store, ikey, source)
    exe = _load_cached(store, store.resolve(ikey), name)
    if exe is not None:
        stats.record_cache("hits")
    return exe


def compile_graph(
    fn_or_gm: Any,
    example_inputs: Sequence[Any],
    *,
    name: str = "graph",
    source: str = "api",
    target: str | None = None,
    options: dict[str, Any] | None = None,
    in_process: bool | None = None,
    store: ExecutableStore | None = None,
    graph_key: str | None = None,
) -> Executable:
    """Compile ``fn_or_gm`` for ``example_inputs`` into an executable.

    With a ``store`` (see ``compiler/store.py``), a ``graph_key`` the store resolves
    loads the executable without prepare, lowering or neuronc; otherwise the graph is
    prepared and lowered (in the worker), the StableHLO text is keyed
    (``keys.executable_key``), a stored executable under that key is used, and only
    then does neuronc run; its result is saved and ``graph_key`` linked to it.
    ``exe.from_cache`` says whether it came from the store.

    Raises ``CompileError`` (with its stage and reason, also counted in
    ``torchneuron.compiler.stats()``) when any stage cannot handle the graph.
    """
    from torchneuron.compiler.lower.worker import run_in_worker

    options = dict(options or {})
    target = target or current_profile().name
    ikey = index_key(graph_key, target, options) if store is not None and graph_key else None
    if ikey is not None:
        _known_failure(store, ikey, source)  # type: ignore[arg-type]
    linked = store.resolve(ikey) if ikey is not None else None  # type: ignore[union-attr]
    exe = (_load_cached(store, linked, name, example_inputs)  # type: ignore[arg-type]
           if linked is not None else None)
    if exe is not None:
        stats.record_cache("hits")
        return exe
    seconds: dict[str, float] = {}
    try:
        with _stage("prepare", "prepare", seconds):
            prepared = prepare(fn_or_gm, list(example_inputs))
        specs = [(tuple(t.shape), tuple(t.stride()), t.dtype) for t in _placeholder_values(prepared)]
        lowered = run_in_worker("torchneuron.compiler.pipeline.lower_graph", prepared.gm, specs,
                                in_process=in_process)
        key, components = executable_key(lowered["stablehlo"], target, options,
                                         _signature(prepared, None))
        cached = (_load_cached(store, key, name)
                  if store is not None and key != linked else None)
        if cached is None:
            compiled = run_in_worker("torchneuron.compiler.pipeline.run_neuronc",
                                     lowered["stablehlo"], target, options, in_process=in_process)
    except CompileError as e:
        stats.record_failure(source, e.stage, e.reason, str(e))
        _remember_failure(store, ikey, e)
        raise
    if cached is not None:  # another graph lowered to the same program
        stats.record_cache("hits")
        if ikey is not None:
            store.link(ikey, key)  # type: ignore[union-attr]
        return cached
    for stage, sec in {**seconds, **lowered["seconds"], **compiled["seconds"]}.items():
        stats.record_stage_time(stage, sec)
    exe = Executable(
        name=name,
        target=target,
        stablehlo=lowered["stablehlo"],
        program=compiled["program"],
        signature=_signature(prepared, compiled["num_ops"]),
        options=options,
        compiler_version=versions.COMPILER_VERSION,
    )
    exe.cache_key = key
    stats.record_success(source)
    if store is not None:
        stats.record_cache("misses")
        _save(store, exe, key, components, ikey, source)
        forget = getattr(store, "forget_failure", None)
        if forget is not None and ikey is not None:
            forget(ikey)  # compiled after all (TORCHNEURON_CACHE_RETRY_FAILED)
    dump.dump_compilation(name, prepared.graph_text, exe)
    return exe


def _save(store: ExecutableStore, exe: Executable, key: str, components: dict[str, Any],
          ikey: str | None, source: str) -> None:
    """Save under ``key`` with a neutral name, so the bytes do not depend on this process."""
    data = dataclasses.replace(exe, name=f"exe-{key[:12]}").to_bytes()
    meta = {"kind": "executable", "name": exe.name, "source": source, "components": components,
            "versions": {"compiler_version": exe.compiler_version,
                         "format_version": exe.format_version}}
    executable.trust_entry(key, data)
    store.save(key, data, meta)
    if ikey is not None:
        store.link(ikey, key)

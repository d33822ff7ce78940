"""One entry point from an FX graph to an executable: the neuron lowering path.

    capture (FX graph) -> prepare -> Torch-MLIR -> StableHLO -> neuron compiler -> executable

``prepare`` runs in the calling process (it needs the live callable); everything
from the Torch-MLIR import on runs in a worker process (``lower_and_compile``), so a
crash in a lowering library is a counted compile failure, never the end of the
user's program. torch.compile and adaptive eager both compile through
``compile_graph``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils._pytree import treespec_dumps

from torchneuron.compiler import dump, stats
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.executable import Executable
from torchneuron.compiler.prepare import PreparedGraph, prepare
from torchneuron.hardware import current_profile, get_profile

__all__ = ["compile_graph", "lower_and_compile"]


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


def lower_and_compile(gm: Any, input_specs: list[tuple[Any, ...]], target: str,
                      options: dict[str, Any]) -> dict[str, Any]:
    """Torch-MLIR import -> StableHLO -> parse -> neuron compiler. Runs in the worker.

    ``input_specs`` are (shape, stride, dtype) of the prepared graph's placeholders.
    Returns JSON-safe data only: the StableHLO text, the program (which holds the
    parsed, folded IR), the StableHLO op count and the seconds each stage took.
    """
    import torch

    from torchneuron.compiler.lower import lower_to_stablehlo
    from torchneuron.compiler.neuronc import compile_module
    from torchneuron.compiler.stablehlo import parse_module

    seconds: dict[str, float] = {}
    with _stage("lower", "the Torch-MLIR import", seconds):
        example_inputs = [torch.empty_strided(shape, stride, dtype=dtype)
                          for shape, stride, dtype in input_specs]
        text = lower_to_stablehlo(gm, example_inputs)
    with _stage("parse", "reading the StableHLO module", seconds, stage="neuronc",
                reason="parse-failed"):
        module = parse_module(text)
    with _stage("neuronc", "the neuron compiler", seconds):
        program = compile_module(module, get_profile(target), options)
    return {
        "stablehlo": text,
        "program": program.to_dict(),
        "num_ops": len(module.functions[module.entry].body),
        "seconds": seconds,
    }


def _placeholder_values(prepared: PreparedGraph) -> list[Any]:
    return [n.meta["val"] for n in prepared.gm.graph.nodes if n.op == "placeholder"]


def _signature(prepared: PreparedGraph, num_ops: int) -> dict[str, Any]:
    def spec(s: Any) -> dict[str, Any]:
        return {"shape": list(s.shape), "stride": list(s.stride), "dtype": str(s.dtype)}

    return {
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


def compile_graph(
    fn_or_gm: Any,
    example_inputs: Sequence[Any],
    *,
    name: str = "graph",
    source: str = "api",
    target: str | None = None,
    options: dict[str, Any] | None = None,
    in_process: bool | None = None,
) -> Executable:
    """Compile ``fn_or_gm`` for ``example_inputs`` into an executable.

    Raises ``CompileError`` (with its stage and reason, also counted in
    ``torchneuron.compiler.stats()``) when any stage cannot handle the graph.
    """
    from torchneuron.compiler.worker import run_in_worker

    options = dict(options or {})
    target = target or current_profile().name
    seconds: dict[str, float] = {}
    try:
        with _stage("prepare", "prepare", seconds):
            prepared = prepare(fn_or_gm, list(example_inputs))
        lowered = run_in_worker(
            "torchneuron.compiler.pipeline.lower_and_compile",
            prepared.gm,
            [(tuple(t.shape), tuple(t.stride()), t.dtype) for t in _placeholder_values(prepared)],
            target,
            options,
            in_process=in_process,
        )
    except CompileError as e:
        stats.record_failure(source, e.stage, e.reason, str(e))
        raise
    for stage, sec in {**seconds, **lowered["seconds"]}.items():
        stats.record_stage_time(stage, sec)
    exe = Executable(
        name=name,
        target=target,
        stablehlo=lowered["stablehlo"],
        program=lowered["program"],
        signature=_signature(prepared, lowered["num_ops"]),
        options=options,
    )
    stats.record_success(source)
    dump.dump_compilation(name, prepared.graph_text, exe)
    return exe

"""Run a StableHLO ``Module`` with torch CPU ops: the simulator's source of numbers.

Every op goes through the ``OPS`` dispatch table (one small function per op, grouped by
family in the ``_ops_*`` modules). Because numbers come from executing the StableHLO
program itself, a wrong lowering gives wrong numbers and parity tests catch it.
Each result is checked against its declared type, so an op implementation that
drifts (say, upcasts bf16 to f32) fails loudly instead of silently changing numerics.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import MutableMapping, Sequence
from typing import Any

import torch

from . import (  # noqa: F401  (importing registers the op families)
    _ops_control,
    _ops_conv,
    _ops_elementwise,
    _ops_gather,
    _ops_misc,
    _ops_reduce,
    _ops_shape,
    _ops_sort,
)
from ._dtypes import TORCH_DTYPES
from ._registry import OPS, StableHLOExecutionError, UnsupportedStableHLOOp
from .ir import Function, Module, Operation, TensorType

__all__ = ["interpret", "OPS", "UnsupportedStableHLOOp", "StableHLOExecutionError"]

_RETURNS = ("func.return", "stablehlo.return")


class _Interpreter:
    """Holds the module so ops can run their regions and call other functions."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.scope: MutableMapping[str, Any] = {}

    def call(self, name: str, args: list[Any]) -> list[Any]:
        fn = self.module.functions.get(name)
        if fn is None:
            raise StableHLOExecutionError(f"call to unknown function @{name}")
        return self.run_function(fn, args)

    def run_function(self, fn: Function, args: list[Any]) -> list[Any]:
        if len(args) != len(fn.args):
            raise StableHLOExecutionError(
                f"@{fn.name} takes {len(fn.args)} inputs, got {len(args)}"
            )
        env = {name: value for (name, _), value in zip(fn.args, args, strict=False)}
        return self.run_block(fn.body, env)

    def region(
        self, op: Operation, index: int, args: list[Any], batched: bool = False
    ) -> list[Any]:
        params = op.region_args[index]
        if len(params) != len(args):
            raise StableHLOExecutionError(
                f"{op.name} region {index} takes {len(params)} values, got {len(args)}"
            )
        # regions see the values of the enclosing block (a while body reads outer constants)
        env = ChainMap(
            {name: value for (name, _), value in zip(params, args, strict=False)}, self.scope
        )
        return self.run_block(op.regions[index], env, check_shapes=not batched)

    def run_block(
        self, ops: list[Operation], env: MutableMapping[str, Any], check_shapes: bool = True
    ) -> list[Any]:
        outer = self.scope
        self.scope = env
        try:
            return self._run_ops(ops, env, check_shapes)
        finally:
            self.scope = outer

    def _run_ops(
        self, ops: list[Operation], env: MutableMapping[str, Any], check_shapes: bool
    ) -> list[Any]:
        for op in ops:
            if op.name in _RETURNS:
                return [env[o] for o in op.operands]
            fn = OPS.get(op.name)
            if fn is None:
                raise UnsupportedStableHLOOp(
                    f"no CPU implementation for {op.name} (result %{', %'.join(op.results)}); "
                    "add one to torchneuron/compiler/stablehlo with @register",
                    op=op.name,
                )
            try:
                args = [env[o] for o in op.operands]
                results = fn(op, args, self)
            except (UnsupportedStableHLOOp, StableHLOExecutionError):
                raise
            except Exception as e:
                raise StableHLOExecutionError(
                    f"{type(e).__name__} while running {_describe(op)}: {e}", op=op.name
                ) from e
            if len(results) != len(op.results):
                raise StableHLOExecutionError(
                    f"{_describe(op)} produced {len(results)} results, expected {len(op.results)}"
                )
            for name, value, tt in zip(op.results, results, op.result_types, strict=False):
                _check(op, value, tt, check_shapes)
                env[name] = value
        raise StableHLOExecutionError("block ended without a return op")


def _describe(op: Operation) -> str:
    lhs = ", ".join(f"%{r}" for r in op.results)
    return f"{lhs} = {op.name}({', '.join('%' + o for o in op.operands)})"


def _check(op: Operation, value: Any, tt: TensorType, check_shapes: bool) -> None:
    """Fail loudly when an implementation returns the wrong shape or dtype."""
    if not isinstance(value, torch.Tensor):
        return
    want = TORCH_DTYPES.get(tt.dtype)
    if want is not None and value.dtype != want:
        raise StableHLOExecutionError(
            f"{_describe(op)} produced dtype {value.dtype}, declared {tt.dtype} "
            "(interpreter bug: op implementations must keep StableHLO dtypes)"
        )
    if check_shapes and (
        len(tt.shape) != value.dim()
        or any(s >= 0 and s != v for s, v in zip(tt.shape, value.shape, strict=False))
    ):
        raise StableHLOExecutionError(
            f"{_describe(op)} produced shape {list(value.shape)}, declared {tt} (interpreter bug)"
        )


def interpret(module: Module, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run ``module.entry`` on CPU tensors; returns fresh contiguous output tensors."""
    fn = module.functions[module.entry]
    args = list(inputs)
    for i, ((name, tt), x) in enumerate(zip(fn.args, args, strict=False)):
        want = TORCH_DTYPES.get(tt.dtype)
        if want is not None and x.dtype != want:
            raise StableHLOExecutionError(
                f"input {i} (%{name}) has dtype {x.dtype}, the program expects {tt}"
            )
        if len(tt.shape) != x.dim() or any(
            s >= 0 and s != v for s, v in zip(tt.shape, x.shape, strict=False)
        ):
            raise StableHLOExecutionError(
                f"input {i} (%{name}) has shape {list(x.shape)}, the program expects {tt}"
            )
    with torch.no_grad():  # the simulator executes a program; it never records autograd
        outs = _Interpreter(module).run_function(fn, args)
    seen = {x.untyped_storage().data_ptr() for x in args if x.numel()}
    result = []
    for o in outs:  # never hand back storage shared with an input or another output
        o = o.contiguous()
        if o.numel() and o.untyped_storage().data_ptr() in seen:
            o = o.clone()
        if o.numel():
            seen.add(o.untyped_storage().data_ptr())
        result.append(o)
    return result

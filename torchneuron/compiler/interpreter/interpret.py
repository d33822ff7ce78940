"""Run a StableHLO ``Module`` with torch CPU ops: the simulator's source of numbers.

Every op goes through the ``OPS`` dispatch table (one small function per op, grouped by
family in the ``_ops_*`` modules). Because numbers come from executing the StableHLO
program itself, a wrong lowering gives wrong numbers and parity tests catch it.
Each result is checked against its declared type, so an op implementation that
drifts (say, upcasts bf16 to f32) fails loudly instead of silently changing numerics.

Why ``load`` then ``run``: an executable runs the same program every training step.
``load`` works on each block once, in this order: results the caller never reads
(``unused_outputs``: ``Executable``'s outputs that are views of its inputs) are dropped;
``_simplify`` turns no-op ops into aliases; ``collapse/`` replaces runs of ops that are one
torch call (max-pooling forward, ``collapse.window`` and ``collapse.pool``, and backward;
ReLU's backward, ``collapse.relu``; ReLU and one-sided clamps, ``collapse.clamp``), or whose
result is known when no NaN is
present (max-pooling's NaN override, ``collapse.nan``), or that form a tree of single-use
elementwise arithmetic (an optimizer's update, ``collapse.pointwise``) by one op; ``_absorb``
drops broadcasts that torch's implicit broadcasting does and folds transposes into the
``dot_general`` reading them; then each op is resolved to its implementation (``_specialize*``: attributes read once), its operand and result
names and the dtype and shape its results must have. Constants, and every op computed
from constants only (a broadcast scalar, a reshaped mask), are computed on the first run
and kept; later runs start from them and run only the other steps, a straight loop with
no table lookups or attribute parsing, each value leaving the run's env after its last
reader (its memory reused while in cache); once a block has run from its constants a few
times, that loop is replaced by one generated straight-line function doing the same
(``_codegen``: values in locals, no per-step bookkeeping). None of this touches the program (the compiler's
cost model reads the program, so simulated times never depend on it), and every step
gives the bits the op-by-op implementations give. Outputs never share storage with an
input, a kept constant or another output (checked by identity of the tensor owning each
one's storage; under inference mode, whose views do not name their base, by storage). ``interpret(module, inputs)`` is ``load(module).run(inputs)``;
``Executable`` keeps its loaded program.
"""

from __future__ import annotations

import operator
from collections import ChainMap
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from typing import Any

import torch

from torchneuron.compiler.interpreter import (  # noqa: F401  (importing registers the op families)
    _ops_control,
    _ops_conv,
    _ops_elementwise,
    _ops_gather,
    _ops_misc,
    _ops_reduce,
    _ops_shape,
    _ops_sort,
    _specialize_index,
    _specialize_math,
)
from torchneuron.compiler.interpreter._absorb import absorb_broadcasts, absorb_transposes
from torchneuron.compiler.interpreter._codegen import Generated, generate
from torchneuron.compiler.interpreter._registry import (
    CONSTANT_OPS,
    NEVER_HOISTED,
    OPS,
    OpFn,
    StableHLOExecutionError,
    UnsupportedStableHLOOp,
)
from torchneuron.compiler.interpreter._simplify import region_reads, simplify
from torchneuron.compiler.interpreter._specialize import specialize
from torchneuron.compiler.interpreter.collapse.base import Collapsed
from torchneuron.compiler.interpreter.collapse.conv_transpose import conv_transposes
from torchneuron.compiler.interpreter.collapse.plugins import collapse
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.custom_targets import TargetRaised
from torchneuron.compiler.stablehlo.ir import Function, Module, Operation, TensorType

__all__ = ["interpret", "load", "Loaded", "OPS", "UnsupportedStableHLOOp",
           "StableHLOExecutionError"]  # fmt: skip

_RETURNS = ("func.return", "stablehlo.return")
_DTYPE, _SHAPE = operator.attrgetter("dtype"), operator.attrgetter("shape")


def _unsupported(op: Operation) -> OpFn:
    def fail(op: Operation, args: list[Any], run: Any) -> list[Any]:
        raise UnsupportedStableHLOOp(
            f"no CPU implementation for {op.name} (result %{', %'.join(op.results)}); "
            "add one to torchneuron/compiler/stablehlo with @register",
            op=op.name,
        )

    return fail


class _Step:
    """One op, resolved: its implementation and what to check about its results."""

    __slots__ = ("op", "fn", "operands", "results", "dtypes", "shapes", "checks", "hoisted",
                 "single", "fetch", "drop")  # fmt: skip

    def __init__(
        self, op: Operation, fn: OpFn, owner: Loaded, hoist: bool, operands: tuple[str, ...]
    ) -> None:
        self.op = op
        self.hoisted = hoist
        # resolved once: constants cached, other ops specialized to their attributes
        self.fn = _constant(fn, owner) if hoist else specialize(op, fn)
        self.operands = operands  # after ``simplify``'s aliasing
        self.fetch = _fetcher(operands)  # env -> the operand values
        self.results = tuple(op.results)
        # (dtype it must have or None, static torch.Size or None when any dim is dynamic)
        self.dtypes = tuple(TORCH_DTYPES.get(tt.dtype) for tt in op.result_types)
        self.shapes = tuple(
            torch.Size(tt.shape) if all(s >= 0 for s in tt.shape) else None
            for tt in op.result_types
        )
        # (name, dtype, shape, declared type) per result, for the loop's checks
        self.checks = tuple(zip(self.results, self.dtypes, self.shapes, op.result_types,
                                strict=False))  # fmt: skip
        # the common case, checked inline by the loop: one result of known dtype and shape
        self.single = (
            len(self.checks) == 1 and self.dtypes[0] is not None and self.shapes[0] is not None
        )
        self.drop: tuple[str, ...] = ()  # values read last by this step (set by ``_Block``)


def _fetcher(operands: tuple[str, ...]) -> Callable[[Any], list[Any]]:
    """A callable listing ``operands``' values from an env: spelled out for the common
    arities (half the cost of a comprehension, which is a call of its own)."""
    if not operands:
        return lambda env: []
    if len(operands) == 1:
        (a,) = operands
        return lambda env: [env[a]]
    if len(operands) == 2:
        a, b = operands
        return lambda env: [env[a], env[b]]
    if len(operands) == 3:
        a, b, c = operands
        return lambda env: [env[a], env[b], env[c]]
    return lambda env: [env[o] for o in operands]


def _constant(fn: OpFn, owner: Loaded) -> OpFn:
    cache: list[list[Any]] = []

    def cached(op: Operation, args: list[Any], run: Any) -> list[Any]:
        if not cache:
            values = fn(op, args, run)
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            # each constant's owner of its storage, and (for inference tensors, whose
            # views have no ``_base``) the storage itself
            owner.constant_ids.update(id(v._base if v._is_view() else v) for v in tensors)
            owner.constant_storages.update(_storage(v) for v in tensors)
            owner.inference_constants |= any(v.is_inference() for v in tensors)
            cache.append(values)
        return list(cache[0])

    return cached


class _Block:
    """A block's loaded steps and the names its return op hands back.

    After its first complete run, the values of its hoisted steps (constants and what is
    computed from constants only) are kept in ``consts`` and later runs start from them
    and run only the other steps (``hot``); after ``Loaded.codegen_after`` such runs,
    those run as one generated function (``gen``, see ``_codegen``) unless the block
    cannot be written so.
    """

    __slots__ = ("steps", "returns", "consts", "hot", "slots", "width", "pinned", "gen",
                 "generated", "hot_runs")  # fmt: skip

    def __init__(
        self, ops: list[Operation], owner: Loaded, unused: frozenset[int] = frozenset()
    ) -> None:
        self.steps: list[_Step] = []
        self.returns: tuple[str, ...] | None = None
        self.consts: dict[str, Any] | None = None
        self.hot: list[_Step] = []
        self.gen: Generated | None = None
        self.generated = False  # whether ``gen`` was tried (None then: the loop runs it)
        self.hot_runs = 0  # runs from ``consts`` on the loop, until ``gen`` is tried
        constant: set[str] = set()  # values the same on every run
        end = next((i for i, op in enumerate(ops) if op.name in _RETURNS), None)
        pinned = self.pinned = region_reads(ops)
        rets = None if end is None else list(ops[end].operands)
        if rets is not None and unused:  # nobody reads these: computing them is waste
            rets = [r for i, r in enumerate(rets) if i not in unused]
        body, returns = simplify(ops if end is None else ops[:end], rets, pinned)
        body = conv_transposes(body)  # eager's transposed kernel (before any collapse)
        body = absorb_broadcasts(collapse(body, returns, pinned), returns, pinned)
        body = absorb_transposes(body, returns, pinned)
        self.returns = returns
        # where each kept result goes among the block's returns (None: an unused one)
        self.slots: tuple[int, ...] | None = None
        self.width = 0
        if unused and end is not None:
            self.slots = tuple(i for i in range(len(ops[end].operands)) if i not in unused)
            self.width = len(ops[end].operands)
        for op, operands in body:
            fn = op.impl if isinstance(op, Collapsed) else OPS.get(op.name)
            hoist = fn is not None and not op.regions and (
                (op.name in CONSTANT_OPS and not operands)
                or (bool(operands) and op.name not in NEVER_HOISTED
                    and all(o in constant for o in operands))
            )  # fmt: skip
            if hoist:
                constant.update(op.results)
            self.steps.append(
                _Step(op, fn if fn is not None else _unsupported(op), owner, hoist, operands)
            )
        self.hot = [s for s in self.steps if not s.hoisted]
        _set_drops(self.steps, returns)

    def generate(self, after: int) -> Generated | None:
        """The hot steps as one straight-line function (``_codegen``), made once, when
        this is the block's run ``after + 1`` from its kept constants; before that, and
        when the block cannot be written so, None: the loop runs them."""
        if not self.generated:
            if self.hot_runs < after:
                self.hot_runs += 1
                return None
            self.generated = True
            self.gen = generate(self, _single_result, _check_results)
        return self.gen


def _set_drops(steps: list[_Step], returns: tuple[str, ...] | None) -> None:
    """Give each step the values of this block that nobody reads after it.

    Why: the run's env holds every value until the block returns, so each op writes a
    fresh allocation and the working set grows with the program (on the CNN loop's
    activations, ~6 MB per executable): measured, an ``add`` of 64 KB tensors takes
    twice as long when its inputs are not the just-freed buffers of the op before.
    Dropped once read for the last time, a value's memory goes back to the allocator
    and the next op reuses it while it is in cache. Kept: the block's returns, the
    hoisted constants (kept for later runs anyway), and whatever a later op's region
    reads by name (counted as read by that op).
    """
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        names = set(step.operands)
        inner = step.op.run_ops if isinstance(step.op, Collapsed) else ()
        names |= region_reads([step.op, *(op for op, _ in inner)])
        for n in names:
            last[n] = i
    keep = set(returns or ())
    drops: list[list[str]] = [[] for _ in steps]
    for i, step in enumerate(steps):
        if step.hoisted:
            continue
        for r in step.results:
            if r not in keep:
                drops[max(last.get(r, i), i)].append(r)
    for step, drop in zip(steps, drops, strict=True):
        step.drop = tuple(drop)


class Loaded:
    """A module made ready to run many times (see the module docstring)."""

    # whether blocks run as generated code (``_codegen``); False keeps the loop
    # everywhere (tests compare the two)
    codegen = True
    # runs of a block from its kept constants on the loop before it is generated: one
    # compile costs about as much as 100-300 runs of the loop save (~0.1 ms per step,
    # against 0.3-0.7 us saved per step and run), so a program run only a few times (a
    # test's, a one-off call) never pays it; a training loop's is generated in warm-up
    codegen_after = 3

    def __init__(self, module: Module, unused_outputs: Iterable[int] = ()) -> None:
        self.module = module
        # entry results nobody reads (the caller takes those from its inputs): not
        # computed, returned as None
        self.unused = frozenset(unused_outputs)
        self.constant_ids: set[int] = set()  # the cached constant tensors themselves
        self.constant_storages: set[int] = set()  # their storages' addresses
        self.inference_constants = False  # whether one was made under inference mode
        self._blocks: dict[int, tuple[list[Operation], _Block]] = {}
        fn = module.functions[module.entry]
        self.entry = fn
        self._inputs = [
            (name, tt, TORCH_DTYPES.get(tt.dtype)) for name, tt in fn.args
        ]  # fmt: skip
        # per input, (dtype, torch.Size) when both are static: checked with two compares
        self._exact = [
            (want, torch.Size(tt.shape)) if want is not None and all(d >= 0 for d in tt.shape)
            else None
            for _, tt, want in self._inputs
        ]  # fmt: skip
        # when every input is static: the dtypes and shapes the inputs must have, compared
        # as two lists (C loops: half the time of the loop below over ~100 inputs)
        self._signature = None if any(e is None for e in self._exact) else (
            [e[0] for e in self._exact], [e[1] for e in self._exact]  # type: ignore[index]
        )  # fmt: skip

    def block(self, ops: list[Operation]) -> _Block:
        """The loaded form of ``ops`` (a function body or an op's region), built once."""
        hit = self._blocks.get(id(ops))
        if hit is None or hit[0] is not ops:
            unused = self.unused if ops is self.entry.body else frozenset()
            hit = self._blocks[id(ops)] = (ops, _Block(ops, self, unused))  # keeps ``ops`` alive
        return hit[1]

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
        """Run the entry function on CPU tensors; returns fresh contiguous outputs
        (None for the unused ones)."""
        args = list(inputs)
        sig = self._signature
        if sig is None or list(map(_DTYPE, args)) != sig[0] or list(map(_SHAPE, args)) != sig[1]:
            self._check_inputs(args)
        with torch.no_grad():  # the simulator executes a program; it never records autograd
            outs = _Interpreter(self).run_function(self.entry, args)
        return self._fresh(args, outs)

    def _check_inputs(self, args: list[Any]) -> None:
        """Each input against its declared type, naming the first that differs."""
        for i, (exact, x) in enumerate(zip(self._exact, args, strict=False)):
            if exact is not None and x.dtype == exact[0] and x.shape == exact[1]:
                continue  # the common case: a static input of the declared type
            name, tt, want = self._inputs[i]
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

    def _fresh(self, args: list[Any], outs: list[Any]) -> list[Any]:
        """The outputs made contiguous, each one its own storage (cloned where not).

        Why by identity: asking every input and output for its storage costs more than
        some small programs' ops. Outside inference mode every tensor the interpreter
        makes is either a view, whose ``_base`` is the tensor that owns its storage, or
        owns its storage (the op implementations never alias memory another way: no
        ``detach``, ``set_`` or storage tricks). So an output shares storage with an
        input, a cached constant or an earlier output exactly when its owner is one of
        theirs. Views of inference tensors (made under ``torch.inference_mode()``, or
        of an inference tensor passed in or kept as a constant) have no ``_base``: then
        the storages themselves are compared (``_fresh_by_storage``).
        """
        if self.inference_constants or torch.is_inference_mode_enabled() or _any_inference(args):
            return self._fresh_by_storage(args, outs)
        # each input's owner: a view's base, else the input itself (a view's own id is
        # added too, harmlessly: no output's owner is a view); ``map`` keeps the loop in C
        known = set(self.constant_ids)
        known.update(map(id, args))
        known.update(map(id, map(_BASE, args)))
        result: list[Any] = []
        for o in outs:
            if o is None:  # an unused output: not computed
                result.append(o)
                continue
            o = o.contiguous()
            owner = o._base  # (an attribute read: cheaper than asking ``_is_view()``)
            if owner is None:
                owner = o
            if id(owner) in known:
                o = owner = o.clone()
            known.add(id(owner))
            result.append(o)
        return result

    def _fresh_by_storage(self, args: list[Any], outs: list[Any]) -> list[Any]:
        """``_fresh`` comparing storage addresses (inference tensors: no ``_base``)."""
        known = set(self.constant_storages)
        known.update(_storage(x) for x in args if isinstance(x, torch.Tensor))
        result: list[Any] = []
        for o in outs:
            if o is not None:
                o = o.contiguous()
                if _storage(o) and _storage(o) in known:  # (an empty one is nobody's)
                    o = o.clone()
                known.add(_storage(o))
            result.append(o)
        return result


_BASE = operator.attrgetter("_base")  # None for a tensor that is not a view
_IS_INFERENCE = torch.Tensor.is_inference


def _any_inference(args: list[Any]) -> bool:
    """Whether an input is an inference tensor (a loop in C when all are tensors)."""
    try:
        return any(map(_IS_INFERENCE, args))
    except TypeError:  # an input that is no tensor
        return any(isinstance(x, torch.Tensor) and x.is_inference() for x in args)


def _storage(t: torch.Tensor) -> int:
    """The address of ``t``'s storage (0, shared by nobody, for an empty one)."""
    s = t.untyped_storage()
    return s.data_ptr() if s.nbytes() else 0


class _Interpreter:
    """One run of a loaded module; ops use it to run their regions and call functions."""

    def __init__(self, loaded: Loaded) -> None:
        self.loaded = loaded
        self.module = loaded.module
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
            return self._run_steps(self.loaded.block(ops), env, check_shapes)
        finally:
            self.scope = outer

    def _run_steps(
        self, block: _Block, env: MutableMapping[str, Any], check_shapes: bool
    ) -> list[Any]:
        loaded = self.loaded
        gen = None
        if loaded.codegen and block.consts is not None:
            gen = block.generate(loaded.codegen_after)
        if gen is not None:
            try:
                return gen.fn(env, self, check_shapes)
            except (UnsupportedStableHLOOp, StableHLOExecutionError, TargetRaised):
                raise
            except Exception as e:
                op = gen.failed_op(e)
                if op is None:  # not an op's failure: as the loop, not wrapped
                    raise
                raise _op_error(e, op) from e
        tensor = torch.Tensor
        consts = block.consts
        if consts is None:
            steps = block.steps
        else:
            env.update(consts)
            steps = block.hot
        for step in steps:
            op = step.op
            try:
                results = step.fn(op, step.fetch(env), self)
            except (UnsupportedStableHLOOp, StableHLOExecutionError, TargetRaised):
                raise
            except Exception as e:
                raise _op_error(e, op) from e
            if step.single:  # the common case, one result of static type: tested inline
                if (
                    len(results) != 1
                    or not isinstance(value := results[0], tensor)
                    or value.dtype is not step.dtypes[0]
                    or (check_shapes and value.shape != step.shapes[0])
                ):
                    value = _single_result(results, step.dtypes[0], step.shapes[0], step,
                                           check_shapes)  # fmt: skip
                env[step.results[0]] = value
                for name in step.drop:
                    del env[name]
                continue
            _check_results(op, results, step.checks, check_shapes)
            for name, value in zip(step.results, results, strict=False):
                env[name] = value
            for name in step.drop:
                del env[name]
        if block.returns is None:
            raise StableHLOExecutionError("block ended without a return op")
        if consts is None:  # first complete run: keep what every later run starts from
            block.consts = {r: env[r] for s in block.steps if s.hoisted for r in s.results}
        values = [env[o] for o in block.returns]
        if block.slots is None:
            return values
        full: list[Any] = [None] * block.width
        for i, v in zip(block.slots, values, strict=True):
            full[i] = v
        return full


def _op_error(e: Exception, op: Operation) -> StableHLOExecutionError:
    """An op implementation's failure, naming the op (the original kept as the cause)."""
    return StableHLOExecutionError(
        f"{type(e).__name__} while running {_describe(op)}: {e}", op=op.name
    )


def _single_result(
    results: list[Any], dtype: torch.dtype, shape: torch.Size, step: _Step, check_shapes: bool
) -> Any:
    """The one result of a step whose result type is static, checked: the slow path of
    the test the loop and generated code make inline (``_check`` explains or accepts
    what that test does not pass: a dtype equal but not identical, a value that is no
    tensor); more or fewer than one result is an error."""
    if len(results) == 1:
        value = results[0]
        if not isinstance(value, torch.Tensor) or (
            value.dtype is dtype and (not check_shapes or value.shape == shape)
        ):
            return value
        _check(step.op, value, step.checks[0][3], check_shapes)
        return value
    _check_results(step.op, results, step.checks, check_shapes)  # raises: a wrong count
    return None


def _check_results(op: Operation, results: list[Any], checks: tuple[Any, ...],
                   check_shapes: bool) -> None:  # fmt: skip
    """The general check of an op's results (any count; types not fully static):
    the count, then each result against its declared dtype and shape."""
    if len(results) != len(checks):
        raise StableHLOExecutionError(
            f"{_describe(op)} produced {len(results)} results, expected {len(op.results)}"
        )
    for (_, dtype, shape, tt), value in zip(checks, results, strict=False):
        if isinstance(value, torch.Tensor) and (
            (dtype is not None and value.dtype != dtype)
            or (check_shapes and (shape is None or value.shape != shape))
        ):
            _check(op, value, tt, check_shapes)  # the slow path: explain or accept


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


def load(module: Module, unused_outputs: Iterable[int] = ()) -> Loaded:
    """``module`` made ready to run many times (the module must not change afterwards).

    ``unused_outputs``: indices of entry results the caller never reads; they are not
    computed (ops only they need are dropped) and come back as None."""
    return Loaded(module, unused_outputs)


def interpret(module: Module, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run ``module.entry`` on CPU tensors; returns fresh contiguous output tensors."""
    return load(module).run(inputs)

"""prepare: any callable or FX graph -> a functional core-aten graph ready for Torch-MLIR.

Steps, in order (each a small function below):
  1. trace with fake tensors: make_fx(functionalize(fn, remove="mutations")) with our
     decomposition table (views stay as views: this torch-mlir lowers `view`, not
     `view_copy`); data-dependent or dynamic-shape ops fail here with a typed error;
  2. write-backs: `copy_` into an input is cut out of the graph and becomes an extra
     output that the caller copies into the input after the run;
  3. random ops become graph inputs (`random_ops`), drawn by eager's kernels;
  4. clean-up: python-scalar outputs become 0-d tensors, None outputs are dropped,
     outputs that alias inputs or other outputs are recorded, dead nodes removed.
  5. error checks: `_linalg_check_errors` (raise on a singular / non-PD input) leaves the
     graph; its info becomes an output checked after the run (`raise_errors`); so do the
     index-range checks (`index_bounds.lift_index_checks`).
  6. complex values (the device has none): a complex input is traced as its
     `view_as_real` pairs (trailing dim 2) and a complex output is returned as pairs;
     `complex_inputs` / `complex_outputs` say which, so the caller converts at the
     boundary (free views both ways). Inside, `decomp.complex` carries them as pairs,
     laid out as eager's results. An output eager returns as a view of a complex input
     or output (`z.real`, `view_as_real(z)`, `conj()`) is refused (`complex-alias`):
     the graph could only return a copy.
Placeholders of the result are the user's tensor inputs followed by the random inputs;
outputs are the user outputs, the write-back values, then the lifted checks' info.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from torchneuron.compiler.decomp.complex import fold_complex_pairs, refuse_complex
from torchneuron.compiler.decomp.fft import refuse_ffts
from torchneuron.compiler.decomp.refusals.uint_casts import refuse_float_to_uint32
from torchneuron.compiler.decomp.table import decomposition_table
from torchneuron.compiler.decomp.upsample_nodes import eager_resample_kernels
from torchneuron.compiler.decomp.variance import fix_degenerate_variances
from torchneuron.compiler.errors import PrepareError
from torchneuron.compiler.prepare.custom_calls import carry_custom_calls
from torchneuron.compiler.prepare.eager_composites import EagerComposites
from torchneuron.compiler.prepare.host_devices import DEVICE_MOVE_DECOMPOSITIONS
from torchneuron.compiler.prepare.index_bounds import (
    IndexCheck,
    lift_index_checks,
    raise_out_of_range,
)
from torchneuron.compiler.prepare.inplace_layouts import InPlaceLayouts
from torchneuron.compiler.prepare.mutating_calls import functionalize_mutating_targets
from torchneuron.compiler.prepare.random_ops import (
    RandomInputSpec,
    draw_random_inputs,
    legalize_random_ops,
)
from torchneuron.compiler.prepare.refuse_custom_ops import refuse_custom_ops, refuse_foreign_ops
from torchneuron.compiler.prepare.rewrites import (
    _extract_write_backs,
    _fold_0d_reductions,
    _fold_aliases,
    _fold_empty,
    _mutates_intermediates,
    _output_node,
    _reject_symbolic,
    _returned_scalar,
    _type_comparison_scalars,
    _view_root,
    format_graph,
)
from torchneuron.compiler.prepare.trace_lock import TRACE_LOCK

__all__ = ["TensorSpec", "UserOutput", "ErrorCheck", "PreparedGraph", "prepare", "format_graph",
           "raise_errors", "inputs_as_pairs", "outputs_from_pairs"]

aten = torch.ops.aten


@dataclass(frozen=True)
class TensorSpec:
    """Shape, stride and dtype of one graph input or output."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorSpec:
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype)


@dataclass
class UserOutput:
    """How to rebuild one leaf of the user's return value from the graph results.

    kind: "tensor" (graph output ``index``), "scalar" (0-d graph output ``index``; the
    caller returns ``.item()`` as ``scalar_type``), or "none" (the user returned None).
    alias_input: the output is user input ``alias_input`` or a view of it (after the
    write-backs): eager returns the input itself (``view`` None) or a view of it, so the
    caller should return ``input.as_strided(*view)``; the graph still computes its value.
    alias_output: the output is the same tensor as, or a view of, an earlier output.
    """

    kind: str
    index: int | None = None
    scalar_type: str | None = None
    alias_input: int | None = None
    alias_output: int | None = None
    view: tuple[tuple[int, ...], tuple[int, ...], int] | None = None


@dataclass(frozen=True)
class ErrorCheck:
    """A lifted ``_linalg_check_errors``: graph output ``output`` is its ``info``."""

    output: int
    api: str
    is_matrix: bool


@dataclass
class PreparedGraph:
    gm: fx.GraphModule
    num_user_inputs: int
    num_user_outputs: int
    write_backs: list[tuple[int, int]]
    random_inputs: list[RandomInputSpec]
    input_specs: list[TensorSpec]
    output_specs: list[TensorSpec]
    user_outputs: list[UserOutput] = field(default_factory=list)
    out_tree: Any = None
    graph_text: str = ""
    error_checks: list[ErrorCheck] = field(default_factory=list)
    index_checks: list[IndexCheck] = field(default_factory=list)
    # user inputs / graph outputs that are complex: the graph takes / gives real pairs
    complex_inputs: list[int] = field(default_factory=list)
    complex_outputs: list[int] = field(default_factory=list)

    def apply_write_backs(self, inputs: Sequence[torch.Tensor], results: Sequence[torch.Tensor]) -> None:
        """Copy write-back outputs into the mutated user inputs, as eager would have."""
        for out_idx, in_idx in self.write_backs:
            inputs[in_idx].copy_(results[out_idx])

    def assemble_outputs(self, inputs: Sequence[torch.Tensor], results: Sequence[torch.Tensor]) -> Any:
        """Rebuild the user's return value (pytree, scalars, Nones, views of inputs)."""
        leaves: list[Any] = []
        for uo in self.user_outputs:
            if uo.kind == "none":
                leaves.append(None)
            elif uo.kind == "scalar":
                assert uo.index is not None
                leaves.append(results[uo.index].item())
            elif uo.alias_input is not None:
                base = inputs[uo.alias_input]
                leaves.append(base if uo.view is None else base.as_strided(*uo.view))
            else:
                assert uo.index is not None
                leaves.append(results[uo.index])
        return pytree.tree_unflatten(leaves, self.out_tree)

    def run_reference(self, inputs: Sequence[torch.Tensor],
                      generator_context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
                      ) -> Any:
        """Run the prepared graph on CPU like an executable would: draw random inputs,
        run, write back, assemble. The numbers every lowering is checked against."""
        rand = draw_random_inputs(self.random_inputs, generator_context, inputs)
        results = list(self.gm(*inputs_as_pairs(inputs, self.complex_inputs), *rand))
        results = outputs_from_pairs(results, self.complex_outputs)
        raise_out_of_range(self.index_checks, inputs, results)
        self.apply_write_backs(inputs, results)
        raise_errors(self.error_checks, results)
        return self.assemble_outputs(inputs, results)


def prepare(fn_or_gm: Callable[..., Any], example_inputs: Sequence[Any] | None = None, *,
            already_aten: bool = False) -> PreparedGraph:
    """Functionalize, decompose, legalize random ops and clean up ``fn_or_gm``.

    ``example_inputs``: tensors become graph inputs (their device is kept for tracing,
    meta tensors are traced as CPU); python scalars are baked in as constants. For an FX
    graph with ``meta["val"]`` on its placeholders (Dynamo / AOTAutograd), inputs may be
    None. ``already_aten`` only documents intent: an aten-level graph is still retraced,
    because retracing is what applies our decompositions and the clean-up.
    """
    with TRACE_LOCK:  # FX's tracing flag is process-wide (see fx_trace.py)
        return _prepare(fn_or_gm, example_inputs)


def _prepare(fn_or_gm: Callable[..., Any], example_inputs: Sequence[Any] | None
             ) -> PreparedGraph:
    if example_inputs is None:
        example_inputs = _inputs_from_meta(fn_or_gm)
    if isinstance(fn_or_gm, fx.GraphModule):
        refuse_foreign_ops(fn_or_gm)
    example = list(example_inputs)
    tensor_pos = [i for i, a in enumerate(example) if isinstance(a, torch.Tensor)]
    if any(example[i].layout != torch.strided for i in tensor_pos):
        raise PrepareError("a sparse (non-strided) tensor input cannot be compiled; expected "
                           "dense tensors. This region runs eagerly.", reason="sparse-input")
    trace_inputs = [_traceable(example[i]) for i in tensor_pos]
    complex_inputs = [k for k, t in enumerate(trace_inputs) if t.is_complex()]
    trace_inputs = inputs_as_pairs(trace_inputs, complex_inputs)
    box: dict[str, Any] = {}

    def flat_fn(*tensors: torch.Tensor) -> list[Any]:
        args = list(example)
        for k, (pos, t) in enumerate(zip(tensor_pos, tensors, strict=True)):
            args[pos] = torch.view_as_complex(t) if k in complex_inputs else t
        out = _plain_structseqs(fn_or_gm(*args))
        leaves, box["tree"] = pytree.tree_flatten(out)
        box["complex"] = [j for j, v in enumerate(leaves)
                          if isinstance(v, torch.Tensor) and v.is_complex()]
        if complex_inputs or box["complex"]:
            box["shares"] = _shared_storages(tensors, leaves)
        return [torch.view_as_real(v.resolve_conj()) if j in box["complex"] else v
                for j, v in enumerate(leaves)]

    gm = _trace(flat_fn, trace_inputs)
    _reject_symbolic(gm)
    fold_complex_pairs(gm)
    fix_degenerate_variances(gm)
    n_in = len(trace_inputs)
    wb_sources = _extract_write_backs(gm)
    gm, specs = legalize_random_ops(gm)
    # an in-place draw into an input (`x.uniform_()`) writes back the drawn value
    wb_sources = {i: n.meta.get("replaced_by", n) for i, n in wb_sources.items()}
    user_outputs, outputs = _clean_outputs(gm, wb_sources)
    complex_outputs = _complex_outputs(user_outputs, box.get("complex", []), complex_inputs,
                                       wb_sources, box.get("shares", {}))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    num_user_outputs = len(outputs)
    write_backs = []
    for in_idx, src in wb_sources.items():
        write_backs.append((len(outputs), in_idx))
        outputs.append(src)
    error_checks = _lift_error_checks(gm, outputs)
    index_checks = lift_index_checks(gm, outputs, n_in)
    out_node.args = (tuple(outputs),)
    _fold_aliases(gm)
    _fold_0d_reductions(gm)
    _fold_empty(gm)
    _type_comparison_scalars(gm)
    gm.graph.eliminate_dead_code()
    refuse_ffts(gm)
    refuse_complex(gm)
    refuse_float_to_uint32(gm)
    carry_custom_calls(gm)  # (custom ops with a registered target: custom_call.py)
    refuse_custom_ops(gm)
    gm = _plain(gm)
    return PreparedGraph(
        gm=gm, num_user_inputs=n_in, num_user_outputs=num_user_outputs,
        write_backs=write_backs, random_inputs=specs,
        input_specs=[TensorSpec.of(p.meta["val"]) for p in placeholders],
        output_specs=[TensorSpec.of(o.meta["val"]) for o in outputs],
        user_outputs=user_outputs, out_tree=box.get("tree"), graph_text=format_graph(gm),
        error_checks=error_checks, index_checks=index_checks,
        complex_inputs=complex_inputs, complex_outputs=complex_outputs)


def inputs_as_pairs(inputs: Sequence[torch.Tensor], complex_inputs: Sequence[int]) -> list[torch.Tensor]:
    """The inputs a prepared graph takes: complex ones as ``view_as_real`` pairs."""
    if not complex_inputs:
        return list(inputs)
    return [torch.view_as_real(t.resolve_conj().resolve_neg()) if k in complex_inputs else t
            for k, t in enumerate(inputs)]


def outputs_from_pairs(results: list[torch.Tensor], complex_outputs: Sequence[int]) -> list[torch.Tensor]:
    """The graph's results with its complex outputs turned back from pairs."""
    for i in complex_outputs:
        results[i] = torch.view_as_complex(results[i].contiguous())
    return results


def _shared_storages(inputs: Sequence[torch.Tensor], leaves: Sequence[Any]
                     ) -> dict[int, set[Any]]:
    """For each tensor leaf of the user's result, the inputs (``("in", k)``) and other
    leaves (``("out", m)``) it shares a storage with, as eager would (views, ``conj()``):
    read while tracing, before any decomposition turned a view into a computation."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def ref(t: torch.Tensor) -> Any:
        try:
            return StorageWeakRef(t.untyped_storage())
        except Exception:  # (no storage: shares nothing we can see)
            return None

    tags = [(("in", k), ref(t)) for k, t in enumerate(inputs)]
    tags += [(("out", m), ref(v)) for m, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    return {m: {tag for tag, r in tags if r is not None and tag != ("out", m) and r == mine}
            for (kind, m), mine in tags if kind == "out" and mine is not None}


def _complex_outputs(user_outputs: list[UserOutput], complex_leaves: list[int],
                     complex_inputs: list[int], wb_sources: dict[int, fx.Node],
                     shares: dict[int, set[Any]]) -> list[int]:
    """Graph output indices of the complex user outputs. Refused (``complex-alias``):
    a complex output that is (a view of) an input or another output, a write-back into a
    complex input, and a real output that is a view of a complex input
    (``view_as_real(z)``, ``z.real``) or of a complex output (``f.real`` next to ``f``):
    eager returns views that follow later in-place writes, and the graph's pairs alias
    the pairs, not the user's complex tensor, so a computed copy would be a different
    result after ``z.mul_(0)``."""
    for j, uo in enumerate(user_outputs):
        tags = shares.get(j, set())
        if j in complex_leaves:  # (a view of) an input or another output: conj(), views
            if tags:
                raise PrepareError("a complex output that aliases an input or another "
                                   "output cannot be compiled; this region runs eagerly.",
                                   reason="complex-alias")
            continue
        aliased = uo.alias_output is not None and any(
            user_outputs[k].index == uo.alias_output for k in complex_leaves)
        aliased = aliased or any(tag in tags for k in complex_leaves for tag in [("out", k)])
        aliased = aliased or any(("in", k) in tags for k in complex_inputs)
        if uo.alias_input in complex_inputs or aliased:
            raise PrepareError("a real output that is a view of a complex input or output "
                               "(view_as_real, .real, .imag) cannot be compiled: the graph "
                               "computes on real pairs, so it could only return a copy, not "
                               "eager's view; this region runs eagerly.",
                               reason="complex-alias")
    if any(i in complex_inputs for i in wb_sources):
        raise PrepareError("an in-place op on a complex input cannot be compiled (the "
                           "graph sees its real pairs); this region runs eagerly.",
                           reason="complex-write-back")
    out = []
    for j in complex_leaves:
        uo = user_outputs[j]
        if uo.alias_input is not None or uo.alias_output is not None or uo.index is None:
            raise PrepareError("a complex output that aliases an input or another output "
                               "cannot be compiled; this region runs eagerly.",
                               reason="complex-alias")
        out.append(uo.index)
    return out


def _lift_error_checks(gm: fx.GraphModule, outputs: list[Any]) -> list[ErrorCheck]:
    """``_linalg_check_errors(info, api, is_matrix)`` raises eagerly when a factorization
    failed (singular, not positive definite): a value-dependent error that no compiled
    program can raise. Each check leaves the graph; its ``info`` becomes an extra output
    (after the write-backs) that the executable checks with the same op after its run,
    so the user gets eager's exception."""
    checks = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten._linalg_check_errors.default:
            continue
        api = node.args[1] if len(node.args) > 1 else node.kwargs["api_name"]
        is_matrix = node.kwargs.get("is_matrix", node.args[2] if len(node.args) > 2 else False)
        checks.append(ErrorCheck(len(outputs), str(api), bool(is_matrix)))
        outputs.append(node.args[0])
        gm.graph.erase_node(node)
    return checks


def raise_errors(checks: Sequence[ErrorCheck], results: Sequence[torch.Tensor]) -> None:
    """Run each lifted check on its ``info`` result: raises eager's error, if any."""
    for check in checks:
        aten._linalg_check_errors(results[check.output], check.api, is_matrix=check.is_matrix)


def _plain(gm: fx.GraphModule) -> fx.GraphModule:
    """Copy into a plain GraphModule (node meta kept): make_fx's module remembers its tracer
    class, and unpickling it (to send it to the compile worker) re-traces with that class
    and fails."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    graph.lint()
    return fx.GraphModule(gm, graph)


def _inputs_from_meta(gm: Any) -> list[Any]:
    if not isinstance(gm, fx.GraphModule):
        raise PrepareError("prepare() needs example_inputs for a plain callable.",
                           reason="no-example-inputs")
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    if any(not isinstance(v, torch.Tensor) for v in vals):
        raise PrepareError("the graph's placeholders lack meta['val'] tensors; pass "
                           "example_inputs.", reason="no-example-inputs")
    return [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype) for v in vals]


def _traceable(t: torch.Tensor) -> torch.Tensor:
    if t.device.type == "meta" or isinstance(t, torch._subclasses.FakeTensor):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    return t


def _plain_structseqs(out: Any) -> Any:
    """torch.return_types (max, median...) anywhere in ``out`` as plain tuples: their
    pytree spec is not storable (``treespec_dumps`` raises)."""
    if isinstance(out, tuple) and hasattr(type(out), "n_fields"):
        return tuple(_plain_structseqs(v) for v in out)
    if type(out) in (tuple, list):
        return type(out)(_plain_structseqs(v) for v in out)
    if type(out) is dict:
        return {k: _plain_structseqs(v) for k, v in out.items()}
    return out


def _trace(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> fx.GraphModule:
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    table = {**decomposition_table(), **DEVICE_MOVE_DECOMPOSITIONS}
    fake_inputs = _fake(inputs)
    functionalize_mutating_targets()  # (custom ops that write an input: mutating_calls.py)

    def trace(f: Callable[..., Any]) -> fx.GraphModule:
        def eager_ops(*args: Any) -> Any:
            with EagerComposites(), InPlaceLayouts():  # as eager's ATen, not functorch's
                return f(*args)  # (eager_composites.py), in-place layouts (inplace_layouts.py)

        return make_fx(torch.func.functionalize(eager_ops, remove="mutations"),
                       decomposition_table=table, tracing_mode="fake",
                       _allow_non_fake_inputs=True, pre_dispatch=False)(*fake_inputs)

    try:
        # The python dispatcher (as AOTAutograd uses) turns native_batch_norm, whose schema
        # hides its running-stat mutation, into _native_batch_norm_legit *above*
        # functionalization, so the running-stat updates become write-backs.
        with enable_python_dispatcher(), eager_resample_kernels():
            gm = trace(fn)
            for _ in range(3):  # decompositions run below functionalization and may mutate
                if not _mutates_intermediates(gm):
                    break
                gm = trace(gm)
        return gm
    except PrepareError:
        raise
    except DynamicOutputShapeException as e:
        raise PrepareError(f"{e.func} has an output shape that depends on input values; "
                           "static-shape compilation cannot express it. It runs eagerly.",
                           op=str(e.func), reason="dynamic-output-shape") from e
    except DataDependentOutputException as e:
        raise PrepareError(f"{e.func} returns a python value computed from tensor data; "
                           "a compiled graph cannot branch on data. It runs eagerly.",
                           op=str(e.func), reason="data-dependent") from e
    except Exception as e:
        low = str(e).lower()
        reason = ("data-dependent" if "data-dependent" in low or "data is not allocated" in low
                  else "trace-failed")
        raise PrepareError(f"tracing to aten failed: {type(e).__name__}: {str(e)[:300]}. "
                           "Expected a traceable tensor program.", reason=reason,
                           detail=str(e)) from e


def _fake(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The inputs as fake tensors of make_fx's own kind of fake mode (static shapes), except
    that ``.item()`` gives an unbacked symbol instead of failing: a python number the
    function only returns (``x.sum().item()``) becomes a 0-d output
    (``_clean_outputs``); one the function branches on or sizes with is refused."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(allow_fallback_kernels=True, allow_non_fake_inputs=True,
                          shape_env=ShapeEnv(allow_scalar_outputs=True), static_shapes=True)
    return [mode.from_tensor(t, static_shapes=True) for t in inputs]


def _clean_outputs(gm: fx.GraphModule, wb_sources: dict[int, fx.Node]
                   ) -> tuple[list[UserOutput], list[fx.Node]]:
    """Turn the flat user outputs into tensor nodes and describe each leaf."""
    out_node = _output_node(gm)
    leaves = list(out_node.args[0])
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    base_of_input = {src: i for i, src in wb_sources.items()}
    user_outputs: list[UserOutput] = []
    outputs: list[fx.Node] = []
    for leaf in leaves:
        if leaf is None:
            user_outputs.append(UserOutput("none"))
            continue
        if isinstance(leaf, (bool, int, float)):
            dtype = {bool: torch.bool, int: torch.int64, float: torch.float64}[type(leaf)]
            with gm.graph.inserting_before(out_node):
                node = gm.graph.call_function(aten.scalar_tensor.default, (leaf,), {"dtype": dtype})
            node.meta["val"] = torch.empty((), dtype=dtype)
            user_outputs.append(UserOutput("scalar", len(outputs), type(leaf).__name__))
            outputs.append(node)
            continue
        if isinstance(leaf, fx.Node) and _returned_scalar(leaf):
            src = leaf.args[0]  # the one-element tensor .item() reads
            kind = type(leaf.meta["val"]).__name__.removeprefix("Sym").lower()
            if src.meta["val"].dim():
                with gm.graph.inserting_before(out_node):
                    src = gm.graph.call_function(aten.view.default, (src, []))
                src.meta["val"] = leaf.args[0].meta["val"].reshape([])
            user_outputs.append(UserOutput("scalar", len(outputs), kind))
            outputs.append(src)
            continue
        if not isinstance(leaf, fx.Node) or not isinstance(leaf.meta.get("val"), torch.Tensor):
            raise PrepareError(f"graph output {leaf!r} is not a tensor or python scalar; "
                               "expected tensors.", reason="non-tensor-output")
        uo = UserOutput("tensor", len(outputs))
        root = _view_root(leaf)
        if root in placeholders[: len(placeholders)] and root.op == "placeholder" and \
                "random_spec" not in root.meta:
            uo.alias_input = placeholders.index(root)
        elif root in base_of_input:
            uo.alias_input = base_of_input[root]
        if uo.alias_input is not None and root is not leaf:
            val = leaf.meta["val"]
            uo.view = (tuple(val.shape), tuple(val.stride()), int(val.storage_offset()))
        for j, prev in enumerate(outputs):
            if prev is leaf or _view_root(prev) is root and root.op != "placeholder":
                uo.alias_output = j
                break
        user_outputs.append(uo)
        outputs.append(leaf)
    return user_outputs, outputs



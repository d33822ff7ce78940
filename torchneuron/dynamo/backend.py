"""``torch.compile(backend="neuron")``: Dynamo graphs -> AOTAutograd -> the neuron compiler.

Dynamo hands us a torch-level FX graph over neuron tensors. AOTAutograd traces it
(through ``NeuronTensor.__tensor_flatten__``, so the joint graph is over the CPU
buffers), splits forward and backward, and gives each graph to ``_compile_graph``,
which compiles it into one executable launch on the simulated NeuronCore. A graph
the compiler cannot handle runs eagerly on the device op by op, and the reason is
counted in ``torchneuron.compiler.stats()``.

Shapes are static, as on the real backend: ``dynamic=True`` is refused; when Dynamo
marks a dimension dynamic by itself after a shape change, each new concrete shape
is traced and compiled again.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import default_partition
from torch._subclasses.fake_tensor import unset_fake_temporarily

from torchneuron.cache import default_store
from torchneuron.compiler import CompileError, compile_graph, decomposition_table, launch
from torchneuron.compiler.decomp.upsample_nodes import eager_resample_kernels
from torchneuron.compiler.keys import fx_graph_key
from torchneuron.compiler.prepare.index_bounds import (
    INDEX_BOUNDS,
    USER_LEVEL_CHECKS,
    raised_by_index_check,
    without_index_checks,
)
from torchneuron.compiler.prepare.inplace_layouts import InPlaceLayouts, lost_inplace_layout
from torchneuron.compiler.prepare.kernel_layouts import fake_strides_differ
from torchneuron.compiler.prepare.random_ops import is_random_op
from torchneuron.compiler.prepare.trace_lock import TRACE_LOCK
from torchneuron.compiler.stats import record_failure, record_fallback_run
from torchneuron.compiler.verify import run_verified, verify_enabled
from torchneuron.device import NeuronTensor, buffers, random
from torchneuron.device.module import current_device
from torchneuron.device.tensor import wrap_buffer
from torchneuron.dynamo import rng_hops
from torchneuron.dynamo.undo_rewrites import undo_dynamo_rewrites
from torchneuron.dynamo.verify_graph import host_graph, verify_first_call
from torchneuron.hardware import get_core

__all__ = ["neuron_backend", "DynamicShapesNotSupported"]

_graph_ids = itertools.count()


class DynamicShapesNotSupported(RuntimeError):
    """torch.compile(dynamic=True) asked for shape-polymorphic graphs."""


def _device_index(example_inputs: list[Any]) -> int:
    for t in example_inputs:
        if isinstance(t, NeuronTensor):
            return t._device_index
        if isinstance(t, torch.Tensor) and t.device.type == "neuron":
            return t.device.index or 0
    return current_device()


def _eager_on_device(gm: torch.fx.GraphModule, index: int, name: str) -> Callable:
    """Run an AOT graph op by op on the device: the fallback for a failed compile."""

    rng_hops.to_device_generator(gm)

    def run(*args: Any) -> Any:
        record_fallback_run(name)
        # not accounted: the inputs' storages are counted by whoever holds them (as before)
        wrapped = [wrap_buffer(a, index, accounted=False) if type(a) is torch.Tensor else a
                   for a in args]
        outs = gm(*wrapped)
        return _held([o.buffer if isinstance(o, NeuronTensor) else o for o in outs], index)

    return run


def _held(outs: list[Any], index: int) -> list[Any]:
    """``outs``, each buffer counted by the device's memory for as long as it lives.

    A graph's outputs leave as plain buffers: the user's are wrapped later (and counted
    then, through the same storage), but the activations AOTAutograd saves for the
    backward stay buffers until the backward frees them; eager holds the same values on
    the device, so they count against its memory as eager's do."""
    for o in outs:
        if type(o) is torch.Tensor:
            buffers.track(o, o, index)
    return outs


def _compile_graph_for(index: int, kind: str) -> Callable:
    def compile_one(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        name = f"{kind}_{next(_graph_ids)}"
        if kind == "backward":
            _drop_dead_random_ops(gm)
        if rng_hops.has_rng_hops(gm):
            record_failure("dynamo", "prepare", "checkpointed-random-op",
                           "a random op under torch.utils.checkpoint is saved and replayed "
                           "with its generator state, so the graph runs eagerly on the device")
            _retarget_factories(gm, "cpu", f"neuron:{index}", wrap=False)
            _constants_to_device(gm, index)
            return make_boxed_func(_eager_on_device(gm, index, name))
        # A copy of the graph only: attributes (lifted constants such as the value of
        # ``torch.tensor([...])``) are shared, not cloned, since cloning a real tensor
        # under the fake mode AOTAutograd leaves active fails.
        graph = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        _retarget_factories(graph, "neuron", "cpu", wrap=False)
        try:
            # Trace with static shapes of our own, not under the fake mode of the
            # TracingContext AOTAutograd leaves installed (its ShapeEnv is symbolic).
            # Nor under its fake mode: the neuron compiler folds constants with real
            # tensors, and the graph key hashes them.
            # AOTAutograd's trace added the index-range checks (user ops only).
            with torch._guards.tracing(None), unset_fake_temporarily(), without_index_checks():
                exe = compile_graph(graph, example_inputs, name=name, source="torch.compile",
                                    store=default_store(),
                                    graph_key=fx_graph_key(graph, example_inputs))
        except CompileError:
            _retarget_factories(gm, "cpu", f"neuron:{index}", wrap=False)
            _constants_to_device(gm, index)
            return make_boxed_func(_eager_on_device(gm, index, name))
        launch.charge_compile(get_core(index), exe)

        check = [verify_enabled()]  # TORCHNEURON_VERIFY: the first run is checked
        refused: list[Callable] = []

        def run(args: list[Any]) -> list[torch.Tensor]:
            if refused:  # the first run differed from eager: eager from now on
                return refused[0](args)
            # Python scalars (specialized sizes) were baked into the graph by prepare;
            # per-shape compilation keys on them, so only tensors are inputs.
            inputs = [a for a in args if isinstance(a, torch.Tensor)]
            graph_args = list(args) if check and check[0] else None
            args.clear()
            core = get_core(index)  # (each call: hardware.reset() may have replaced it)
            if check and check.pop():
                core.host(core.profile.graph_guard_ns, "guard")
                gen = random.generator(index)
                outs, mismatch = run_verified(
                    name, _on_host(graph), inputs,
                    lambda a: launch.launch(exe, a, core, index, guard_ns=0),
                    get_rng_state=gen.get_state, set_rng_state=gen.set_state,
                    source="torch.compile", graph_args=graph_args)
                if mismatch is not None:
                    _retarget_factories(gm, "cpu", f"neuron:{index}", wrap=False)
                    _constants_to_device(gm, index)
                    refused.append(make_boxed_func(_eager_on_device(gm, index, name)))
                return _held(outs, index)
            return _held(launch.launch(exe, inputs, core, index, core.profile.graph_guard_ns),
                         index)

        run._boxed_call = True  # type: ignore[attr-defined]
        run.executable = exe  # type: ignore[attr-defined]
        return run

    return compile_one


def _drop_dead_random_ops(gm: torch.fx.GraphModule) -> None:
    """Remove random ops whose results nothing reads from a backward graph (in place).

    After a shape change Dynamo hands over graphs with symbolic sizes, and AOTAutograd's
    backward for them keeps the forward's ``bernoulli`` with no users (FX keeps a random
    op as impure). Eager's backward draws nothing; lifted as a random input, the dead
    draw advanced the device generator, so every dropout mask after the first backward
    of a new batch size differed from eager's."""
    dead = [n for n in gm.graph.nodes
            if n.op == "call_function" and not n.users and is_random_op(n.target)]
    for node in dead:
        gm.graph.erase_node(node)
    if dead:
        gm.graph.eliminate_dead_code()
        gm.recompile()


def _on_host(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``graph`` whose device moves (``prims.device_put`` to neuron) stay on the
    host: the verification reference runs over the CPU buffers, as the executable does."""
    ref = torch.fx.GraphModule(graph, copy.deepcopy(graph.graph))
    for node in ref.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.prims.device_put.default:
            node.args = (node.args[0], torch.device("cpu"), *node.args[2:])
    ref.recompile()
    return ref


def _constants_to_device(gm: torch.fx.GraphModule, index: int) -> None:
    """Host constants lifted into the graph (``torch.tensor([...])`` in user code) go to
    the device, so the eager fallback does not mix devices."""
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value = getattr(gm, node.target, None)
        if type(value) is torch.Tensor and value.device.type == "cpu":
            with unset_fake_temporarily():  # a real copy, not a trace of one
                setattr(gm, node.target, value.to(f"neuron:{index}"))


def _retarget_factories(gm: torch.fx.GraphModule, src: str, dst: str, wrap: bool) -> None:
    """Move factory ops (``torch.arange(..., device=src)``) in ``gm`` to device ``dst``.

    Dynamo graphs (``wrap=True``, neuron -> cpu): under tracing, a factory op on the
    neuron device is answered by the fake tensor mode itself and yields a plain tensor
    *on* neuron rather than a neuron wrapper of a CPU buffer; building the buffer on
    CPU and wrapping it keeps every tensor a neuron tensor over a CPU buffer, which is
    what AOTAutograd unwraps. AOTAutograd graphs are over CPU buffers: to compile
    them, stray neuron factories go to CPU; to run them eagerly on the device (the
    fallback), CPU factories go to neuron.
    """
    for node in list(gm.graph.nodes):
        dev = node.kwargs.get("device") if node.op == "call_function" else None
        if dev is None or not isinstance(dev, (torch.device, str)):
            continue
        dev = torch.device(dev)
        if dev.type != src:
            continue
        node.kwargs = {**node.kwargs, "device": torch.device(dst)}
        if not wrap:
            continue
        with gm.graph.inserting_after(node):
            # not accounted: a traced graph's tensors are no device memory of their own
            wrapped = gm.graph.call_function(wrap_buffer, (node, dev.index or 0),
                                             {"accounted": False})
        node.replace_all_uses_with(wrapped, delete_user_cb=lambda u, w=wrapped: u is not w)
    gm.recompile()


def _aot(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    index = _device_index(example_inputs)
    _retarget_factories(gm, "neuron", "cpu", wrap=True)
    # AOTAutograd's trace must not overlap a background one (fx_trace.py); resampling ops
    # reach the decomposition table (decomp/upsample_nodes.py); the program's in-place ops
    # keep their tensor's layout through its functionalization (prepare/inplace_layouts.py:
    # not those of autograd's formulas, which run below it)
    with TRACE_LOCK, eager_resample_kernels(), InPlaceLayouts():
        return aot_autograd(
            fw_compiler=_compile_graph_for(index, "forward"),
            bw_compiler=_compile_graph_for(index, "backward"),
            inference_compiler=_compile_graph_for(index, "inference"),
            partition_fn=_partition,
            decompositions=decomposition_table(),
            keep_inference_input_mutations=True,
        )(gm, example_inputs)


class _LayoutNotEagers(Exception):
    """(reason, message): the joint graph's layouts are not eager's (``_partition``)."""


def _partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
    """AOTAutograd's default partition, after a look at the joint graph: the in-place fills
    of autograd's formulas reach it functionalized, in a layout eager does not give
    (``prepare/inplace_layouts.lost_inplace_layout``), and an elementwise op's traced
    strides may not be its CPU kernel's (``prepare/kernel_layouts.fake_strides_differ``:
    the graph's views and the operands of eager's kernels are planned on them). Even the
    backward graph run eagerly would keep those layouts, so Dynamo's graph runs eagerly
    instead (real autograd, eager's formulas)."""
    lost = lost_inplace_layout(joint)
    if lost is not None:
        raise _LayoutNotEagers("inplace-layout-lost", f"the joint graph makes a strided "
                               f"masked_fill contiguous ({lost}): an in-place fill in a "
                               "derivative formula keeps its tensor's layout in eager")
    differ = fake_strides_differ(joint)
    if differ is not None:
        raise _LayoutNotEagers("fake-strides-differ", f"the traced strides of {differ} are "
                               "not those its CPU kernel gives")
    return default_partition(joint, joint_inputs, **kwargs)


def _aot_or_eager(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """``_aot``, or Dynamo's graph run eagerly on the device when AOTAutograd cannot trace
    it over the neuron wrappers (counted: ``prepare`` / ``restrided-in-place``).

    Why: functionalizing an in-place op whose functional form returns other strides
    (``x.t().clone().cumsum_(0)``, ``tril_``, ``cumprod_`` on a transposed tensor: the
    functional op gives a contiguous result, eager keeps the transposed layout) leaves the
    buffer with strides the wrapper did not trace with, and AOTAutograd's check of
    ``NeuronTensor.__tensor_unflatten__`` fails with an AssertionError that torch.compile
    would raise as BackendCompilerFailed. Eager gives the result and layout eager gives."""
    verify = verify_enabled() and not isinstance(gm, torch._dynamo.utils.GmWrapper)
    host = host_graph(gm) if verify else None  # (before _aot retargets its factories)
    try:
        compiled = _eager_when_needed(_aot(gm, example_inputs), gm)
        if host is not None:
            return verify_first_call(compiled, gm, host, _device_index(example_inputs))
        return compiled
    except _LayoutNotEagers as e:
        reason, message = e.args
        record_failure("dynamo", "prepare", reason,
                       f"{message}, so the graph runs eagerly on the device")
        return gm.forward
    except AssertionError as e:
        if "__tensor_unflatten__" not in str(e) or "stride" not in str(e):
            raise
        record_failure("dynamo", "prepare", "restrided-in-place",
                       "an in-place op whose functional form changes the tensor's strides "
                       f"cannot be traced over neuron tensors ({str(e)[:160]}), so the graph "
                       "runs eagerly on the device")
        return gm.forward


def _is_symbolic(x: Any) -> bool:
    if isinstance(x, torch.SymInt):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in x.shape)
    return False


def _multilabel_margin_loss(x: torch.Tensor, y: torch.Tensor, size_average: Any = None,
                            reduce: Any = None, reduction: str = "mean") -> torch.Tensor:
    """``F.multilabel_margin_loss`` as the aten op (the table makes it eager's kernel), or
    for a 0-d / 1-d input through our decomposition (``decomp.index``).

    Why: PyTorch's meta kernel gives a 0-d / 1-d input's unreduced loss shape [1] where
    eager gives a 0-d loss. (Its Python kernel at the Autograd key, which also counted
    the positions after a row's -1, is removed by ``decomp.index``.)
    """
    from torch.nn import _reduction

    from torchneuron.compiler.decomp.index import multilabel_margin_loss_forward

    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce)
    if y.numel():  # eager's range check of the target (index_bounds.py)
        INDEX_BOUNDS(y, -1, int(x.shape[-1]) if x.dim() else 1, 0, "multilabel")
    if x.dim() >= 2:  # the op itself: the table keeps it as eager's kernel (eager's bits)
        return torch.ops.aten.multilabel_margin_loss_forward.default(
            x, y, _reduction.get_enum(reduction))[0]
    return multilabel_margin_loss_forward(x, y, _reduction.get_enum(reduction))[0]


def _rewrite_multilabel_margin_loss(gm: torch.fx.GraphModule) -> str | None:
    """Every ``F.multilabel_margin_loss`` call goes through ``_multilabel_margin_loss``.
    For a 0-d / 1-d input Dynamo traced the loss's users with the meta shape [1]: only a
    loss returned as is can take eager's 0-d shape; otherwise the graph runs eagerly
    (returned: the reason, counted as a failure)."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not F.multilabel_margin_loss:
            continue
        x = node.args[0].meta.get("example_value") if node.args and isinstance(
            node.args[0], torch.fx.Node) else None
        if not isinstance(x, torch.Tensor):
            return "multilabel_margin_loss of an input without a traced value"
        if x.dim() <= 1 and any(u.op != "output" for u in node.users):
            return f"multilabel_margin_loss of a {x.dim()}-d input, used in the graph: " \
                   "PyTorch's fake-tensor result has another shape than eager's there"
        node.target = _multilabel_margin_loss
        changed = True
    if changed:
        gm.recompile()
    return None


def _user_level_index_checks(gm: torch.fx.GraphModule) -> None:
    """Ops whose index check PyTorch's tracing would drop get ours (index_bounds.py)."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in USER_LEVEL_CHECKS:
            node.target = USER_LEVEL_CHECKS[node.target]
    gm.recompile()


def _inputs_share_storage(args: tuple) -> bool:
    """Whether two neuron tensor inputs are views of one storage.

    Why: AOTAutograd finds aliased inputs from their storages, and each neuron wrapper has
    a storage of its own (the values live in its buffer), so it compiles as if they were
    apart: ``a.add_(1); return b * 2`` on ``base[:6]`` and ``base[2:]`` read ``b`` stale."""
    seen = set()
    for a in args:
        if isinstance(a, NeuronTensor) and a.numel():
            ptr = a.buffer.untyped_storage().data_ptr()
            if ptr in seen:
                return True
            seen.add(ptr)
    return False


def _eager_when_needed(compiled: Callable, gm: torch.fx.GraphModule) -> Callable:
    """``compiled``, or Dynamo's graph run eagerly on the device when the compiled one
    cannot give eager's results: inputs that share a storage (counted as the fallback run
    ``aliased-inputs``), or an executable's index check that failed.

    Why Dynamo's graph for a failed check: the check runs after the program and before
    any write-back, so the inputs are as they were; AOTAutograd's graph moved the user's
    in-place writes to its end, and only Dynamo's graph has them where the user wrote
    them: run eagerly, it makes the writes eager makes before the failing op
    (``acc.add_(1); table[bad]``), and raises eager's own error there."""
    if isinstance(gm, torch._dynamo.utils.GmWrapper):
        return compiled  # called with a list it empties (boxed): no second run

    def run(*args: Any) -> Any:
        if _inputs_share_storage(args):
            record_fallback_run("aliased-inputs")
            return gm.forward(*args)
        try:
            return compiled(*args)
        except Exception as e:
            if not raised_by_index_check(e):
                raise
        return gm.forward(*args)

    # not functools.wraps: Dynamo calls a ``__wrapped__`` function directly
    run.__dict__.update({k: v for k, v in compiled.__dict__.items() if k != "__wrapped__"})
    return run


def _outputs_view_one_intermediate(gm: torch.fx.GraphModule) -> bool:
    """Whether two of the graph's outputs are views of one tensor the graph computes
    (``t, t.view(-1)``; ``t[0], t[1]``: kept apart although they do not overlap).

    Why: AOTAutograd regenerates such views from one base only when it sees them share a
    storage, and each neuron wrapper has a storage of its own; compiled, they came back
    as copies, so an in-place write to one was lost in the other. Views of an input are
    handled by prepare (``alias_input``)."""
    def root(t: torch.Tensor) -> int:
        while t._base is not None:
            t = t._base
        return id(t)

    nodes = list(gm.graph.nodes)
    inputs = {root(v) for n in nodes if n.op == "placeholder"
              and isinstance(v := n.meta.get("example_value"), torch.Tensor)}
    out = next((n for n in reversed(nodes) if n.op == "output"), None)
    if out is None:
        return False
    roots: set[int] = set()
    for leaf in torch.utils._pytree.tree_leaves(out.args):
        val = leaf.meta.get("example_value") if isinstance(leaf, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            continue
        base = root(val)
        if base in inputs:
            continue
        if base in roots:
            return True
        roots.add(base)
    return False


def _control_flow(gm: torch.fx.GraphModule) -> str | None:
    """The name of a control-flow higher-order op in ``gm`` (``torch.cond``), or None.

    The neuron compiler lowers straight-line graphs only; eager runs such an op by
    reading the predicate and running one branch (``dispatch.control_flow``)."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(
                node.target, torch._ops.HigherOrderOperator) and node.target.name() in (
                "cond", "while_loop"):
            return node.target.name()
    return None


def _holds_lstm(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` calls ``torch.lstm`` (an ``nn.LSTM`` traced with Dynamo's
    ``allow_rnn``; by default Dynamo breaks the graph there and it runs eagerly).

    Why refused: on the CPU a float LSTM is oneDNN's fused layer (``dispatch/lstm.py``),
    whose forward keeps the backward's workspace only in grad mode, which AOTAutograd's
    compiled forward turns off (the forward then handed the backward no workspace), and
    whose bits are oneDNN's own. Run eagerly, the device takes the CPU's path."""
    return any(node.op == "call_function" and node.target is torch._C._VariableFunctions.lstm
               for node in gm.graph.nodes)


def neuron_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable:
    """The ``neuron`` torch.compile backend."""
    if _holds_lstm(gm):
        record_failure("dynamo", "prepare", "lstm-layer",
                       "torch.lstm (nn.LSTM under allow_rnn) is the CPU's oneDNN layer in "
                       "eager, which a compiled graph cannot reproduce, so the graph runs "
                       "eagerly on the device")
        return gm.forward
    flow = _control_flow(gm)
    if flow is not None:
        record_failure("dynamo", "prepare", "control-flow",
                       f"torch.{flow} has data-dependent control flow, which the neuron "
                       "compiler does not lower, so the graph runs eagerly on the device")
        return gm.forward
    _user_level_index_checks(gm)
    eager_only = undo_dynamo_rewrites(gm)
    if eager_only is not None:
        record_failure("dynamo", "prepare", "dynamo-fma", eager_only)
        return gm.forward
    defect = _rewrite_multilabel_margin_loss(gm)
    if defect is not None:
        record_failure("dynamo", "prepare", "meta-shape-differs",
                       f"{defect}, so the graph runs eagerly on the device")
        return gm.forward
    if _outputs_view_one_intermediate(gm):
        record_failure("dynamo", "prepare", "aliased-outputs",
                       "outputs that are views of one computed tensor would come back as "
                       "separate copies, so the graph runs eagerly on the device")
        return gm.forward
    if not torch._dynamo.config.assume_static_by_default:
        raise DynamicShapesNotSupported(
            "torch.compile(backend='neuron') compiles static shapes only, as the Neuron "
            "compiler does: dynamic=True is not supported. Call torch.compile without "
            "dynamic=True; each new input shape is then compiled once."
        )
    if not any(_is_symbolic(x) for x in example_inputs):
        return _aot_or_eager(gm, example_inputs)

    # Dynamo marked dimensions dynamic after a shape change: specialize per shape.
    compiled: dict[tuple, Callable] = {}

    def per_shape(*args: Any) -> Any:
        key = tuple(
            (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args
        )
        fn = compiled.get(key)
        if fn is None:
            fn = compiled[key] = _aot_or_eager(gm, list(args))
        return fn(*args)

    return per_shape

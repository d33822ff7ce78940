"""Random-op legalization: compiled graphs draw exactly the numbers eager draws.

Eager on the device runs each random aten op (tag ``nondeterministic_seeded``) with ATen's
CPU kernel under the device generator's state. ATen's kernels are not reproducible from
arithmetic on uniform numbers (bernoulli with a scalar p uses MKL's stream on CPU, for
one), so we do not try: every random node is cut out of the graph and becomes a new graph
input, described by a JSON-safe :class:`RandomInputSpec`. Before each run the caller calls
:func:`draw_random_inputs`, which re-runs the same aten ops on CPU, in graph order, on
fresh empty tensors of the recorded shapes, inside the caller's generator context.

Tensor arguments whose *values* matter (``bernoulli(probs)``, ``normal(mean, std)``,
``multinomial``, ``rrelu``'s input...) are accepted when the draw can still happen before
the executable runs: the argument is a graph input (drawn from the caller's tensor, which
the graph has not changed yet: a functional graph reads its inputs' original values) or an
earlier draw. Any other computed argument raises
``PrepareError(reason="random-op-with-tensor-values")``: splitting the graph around the
draw is not done. Arguments listed in :data:`SHAPE_ONLY_ARGS` (tensors that merely give
the result's shape, dtype and layout) are always accepted.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.errors import PrepareError

__all__ = [
    "RandomInputSpec",
    "SHAPE_ONLY_ARGS",
    "LEGACY_CONTIGUOUS_OPS",
    "is_random_op",
    "legalize_random_ops",
    "draw_random_inputs",
]

# op overload name -> positional indices of tensor args that only provide shape/dtype.
SHAPE_ONLY_ARGS: dict[str, tuple[int, ...]] = {
    "aten.bernoulli.p": (0,),
    "aten.uniform.default": (0,),
    "aten.normal_functional.default": (0,),
    "aten.exponential.default": (0,),
    "aten.geometric.default": (0,),
    "aten.cauchy.default": (0,),
    "aten.log_normal.default": (0,),
    "aten.random.default": (0,),
    "aten.random.from": (0,),
    "aten.random.to": (0,),
    "aten.rand_like.default": (0,),
    "aten.randn_like.default": (0,),
    "aten.randint_like.default": (0,),
    "aten.randint_like.low_dtype": (0,),
    "aten.randint_like.Tensor": (0,),
    # the noise tensor is written (the draw, or 1 where the input is positive), never read
    "aten.rrelu_with_noise_functional.default": (1,),
}


# Functional random ops whose ATen kernel draws into a *contiguous* result whatever the
# layout of its shape argument (``bernoulli.p`` is ``empty_like(self, contiguous)`` +
# ``bernoulli_``), while the in-place op functionalization turns into the same node draws
# in the argument's memory order. The others keep the argument's layout, as in-place does.
LEGACY_CONTIGUOUS_OPS = frozenset({"aten.bernoulli.p"})


@dataclass
class RandomInputSpec:
    """How to redraw one random node. JSON-safe (``asdict`` / ``from_dict`` round trip).

    ``args`` / ``kwargs`` hold the non-tensor arguments; a tensor argument that only gives
    a shape appears as ``{"tensor": i}`` pointing into ``tensor_args`` (shape, stride,
    dtype), one whose values are read as ``{"input": i}`` (the i-th graph input) or
    ``{"drawn": k}`` (the k-th tensor drawn before it), dtypes as ``{"dtype": "float32"}``.
    ``shape``/``dtype`` describe the result; ``outputs`` is the number of tensors an op
    with a tuple result returns (0: a single tensor), each one a graph input of its own.
    """

    op: str
    args: list[Any]
    kwargs: dict[str, Any]
    tensor_args: list[dict[str, Any]] = field(default_factory=list)
    shape: list[int] = field(default_factory=list)
    dtype: str = "float32"
    outputs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RandomInputSpec:
        return cls(**d)


def is_random_op(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and (
        torch.Tag.nondeterministic_seeded in target.tags)


# random ops by the position of their ``dropout_p``: with 0 they draw nothing, and stay in
# the graph as the ops they are (CPU's flash attention: eager's kernel, eager_kernels.py)
_DROPOUT_AT = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default: 3}


def _draws_nothing(node: fx.Node) -> bool:
    at = _DROPOUT_AT.get(node.target)  # type: ignore[call-overload]
    if at is None:
        return False
    p = node.args[at] if len(node.args) > at else node.kwargs.get("dropout_p", 0.0)
    return isinstance(p, (int, float)) and p == 0


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _encode(value: Any, op: str) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": _dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": "cpu"}  # eager draws random numbers with CPU kernels
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, (list, tuple)):
        return [_encode(v, op) for v in value]
    if isinstance(value, torch.Generator):
        raise PrepareError(
            f"random op {op} was called with an explicit torch.Generator; compiled graphs "
            "draw from the device's default generator only. Use the default generator, "
            "or run this code eagerly.", op=op, reason="explicit-generator")
    raise PrepareError(f"random op {op} has an argument of unsupported type "
                       f"{type(value).__name__}; expected scalars, dtypes or shape-only "
                       "tensors.", op=op, reason="random-op-unsupported-arg")


def _decode(value: Any, tensors: list[torch.Tensor], inputs: Sequence[torch.Tensor] = (),
            drawn: Sequence[torch.Tensor] = ()) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, inputs, drawn) for v in value]
    if isinstance(value, dict):
        if "tensor" in value:
            return tensors[value["tensor"]]
        if "input" in value:
            return inputs[value["input"]]
        if "drawn" in value:
            return drawn[value["drawn"]]
        if "dtype" in value:
            return getattr(torch, value["dtype"])
        if "device" in value:
            return torch.device("cpu")
        if "layout" in value:
            return getattr(torch, value["layout"])
        if "memory_format" in value:
            return getattr(torch, value["memory_format"])
    return value


def _value_ref(v: fx.Node, inputs: list[fx.Node]) -> dict[str, int] | None:
    """``{"input": i}`` / ``{"drawn": k}`` for an argument available before the graph
    runs (a graph input, an earlier draw), else None."""
    if v.op != "placeholder":
        return None
    if "random_spec" in v.meta:
        return {"drawn": v.meta["random_spec"]}
    return {"input": inputs.index(v)} if v in inputs else None


def _node_spec(node: fx.Node, inputs: list[fx.Node]) -> RandomInputSpec:
    op = str(node.target)
    shape_only = SHAPE_ONLY_ARGS.get(op, ())
    tensor_args: list[dict[str, Any]] = []

    def enc(v: Any, pos: int | None) -> Any:
        if isinstance(v, fx.Node):
            if pos not in shape_only:
                ref = _value_ref(v, inputs)
                if ref is not None:
                    return ref
                raise PrepareError(
                    f"random op {op} reads the values of a tensor computed inside the graph "
                    f"(position {pos}); such draws cannot be lifted out of the graph and "
                    "replayed exactly. Expected shape-giving tensors, graph inputs or earlier "
                    "draws. This region runs eagerly.",
                    op=op, reason="random-op-with-tensor-values")
            val = v.meta["val"]
            if op in LEGACY_CONTIGUOUS_OPS and not _draw_layout_is_known(node, v):
                raise PrepareError(
                    f"random op {op} fills a tensor of strides {list(val.stride())}: eager "
                    "draws into that layout for an in-place `bernoulli_` but contiguously "
                    "for `torch.bernoulli`, and the functional graph no longer says which "
                    "it was. Expected a contiguous tensor; this region runs eagerly.",
                    op=op, reason="random-op-layout")
            tensor_args.append({"shape": list(val.shape), "stride": list(val.stride()),
                                "dtype": _dtype_name(val.dtype)})
            return {"tensor": len(tensor_args) - 1}
        return _encode(v, op)

    args = [enc(a, i) for i, a in enumerate(node.args)]
    kwargs = {k: enc(v, None) for k, v in node.kwargs.items()}
    val = node.meta.get("val")
    outputs = 0
    if isinstance(val, (tuple, list)) and val and all(isinstance(v, torch.Tensor) for v in val):
        outputs, val = len(val), val[0]
    if not isinstance(val, torch.Tensor):
        raise PrepareError(f"random op {op} does not produce tensors; expected a tensor or "
                           "a tuple of tensors.", op=op, reason="random-op-multi-output")
    return RandomInputSpec(op=op, args=args, kwargs=kwargs, tensor_args=tensor_args,
                           shape=list(val.shape), dtype=_dtype_name(val.dtype), outputs=outputs)


def _draw_layout_is_known(node: fx.Node, shape_arg: fx.Node) -> bool:
    """Whether eager's draw order for ``bernoulli.p(shape_arg)`` is the contiguous one.

    A contiguous argument: yes. PyTorch's dropout, traced with tensor subclasses (fake,
    functional), draws ``bernoulli.p(empty([]).expand(x.shape))`` and scales ``x`` by
    it, where eager filled ``empty_like(x)`` in place: contiguous only if ``x`` is. The mask
    may first be scaled by numbers (alpha dropout's ``(m - 1) * c + d`` and ``m * a``);
    what combines it with other tensors must be a product (at least one: the ``x``) or a
    sum, each with a contiguous other operand. Anything else (a transposed tensor filled
    in place, say) is not known.
    """
    if shape_arg.meta["val"].is_contiguous():
        return True
    src = shape_arg.args[0] if shape_arg.target is torch.ops.aten.expand.default else None
    if not isinstance(src, fx.Node) or src.meta["val"].dim() != 0:
        return False
    aten = torch.ops.aten
    derived, frontier, ends = {node}, [node], []
    while frontier:  # through the scalings dropout applies (alpha dropout: several)
        n = frontier.pop()
        for user in n.users:
            if user.target in _SCALINGS and user.args[0] is n:
                if user not in derived:
                    derived.add(user)
                    frontier.append(user)
            else:
                ends.append(user)
    for user in ends:  # each combines the mask with the tensor eager filled it like
        if user.target not in (aten.mul.Tensor, aten.add.Tensor):
            return False
        other = [a for a in user.args if isinstance(a, fx.Node) and a not in derived]
        if len(other) != 1 or not other[0].meta["val"].is_contiguous():
            return False
    return any(u.target is aten.mul.Tensor for u in ends)


_SCALINGS = frozenset({torch.ops.aten.div.Scalar, torch.ops.aten.mul.Scalar,
                       torch.ops.aten.add.Scalar, torch.ops.aten.sub.Scalar})


def legalize_random_ops(gm: fx.GraphModule) -> tuple[fx.GraphModule, list[RandomInputSpec]]:
    """Replace every random node by a new placeholder (appended after the existing ones,
    in graph order; one per tensor of a tuple result, which replaces the node's
    ``getitem`` users) and return the specs that redraw them. Mutates and returns ``gm``."""
    graph = gm.graph
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    last = inputs[-1] if inputs else None
    specs: list[RandomInputSpec] = []
    drawn = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not is_random_op(node.target) or _draws_nothing(node):
            continue
        spec = _node_spec(node, inputs)
        vals = node.meta["val"] if spec.outputs else [node.meta["val"]]
        phs = []
        for val in vals:
            if last is None:
                ctx: Any = graph.inserting_before(next(iter(graph.nodes)))
            else:
                ctx = graph.inserting_after(last)
            with ctx:
                last = graph.placeholder(f"random_{drawn}")
            last.meta = {"val": val, "random_spec": drawn}
            drawn += 1
            phs.append(last)
        if spec.outputs:
            for user in list(node.users):
                if user.target is not operator.getitem:
                    raise PrepareError(f"random op {spec.op} returns a tuple used other than "
                                       "by indexing; expected getitem users.", op=spec.op,
                                       reason="random-op-multi-output")
                user.replace_all_uses_with(phs[user.args[1]])
                user.meta["replaced_by"] = phs[user.args[1]]
                graph.erase_node(user)
        else:
            if "tensor_meta" in node.meta:
                phs[0].meta["tensor_meta"] = node.meta["tensor_meta"]
            node.replace_all_uses_with(phs[0])
            node.meta["replaced_by"] = phs[0]  # for holders of the node (write-back sources)
        graph.erase_node(node)
        specs.append(spec)
    graph.lint()
    gm.recompile()
    return gm, specs


def draw_random_inputs(
    specs: Sequence[RandomInputSpec],
    generator_context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    inputs: Sequence[torch.Tensor] = (),
) -> list[torch.Tensor]:
    """Redraw the random inputs on CPU, in graph order, exactly as eager would.

    ``generator_context`` is a factory of a context manager inside which the CPU default
    generator holds the device's RNG state (and is written back on exit); by default no
    swap: the CPU default generator is used directly. ``inputs`` are the graph's inputs
    as the caller passes them (read by draws whose arguments are inputs).
    """
    ctx = generator_context() if generator_context is not None else contextlib.nullcontext()
    out: list[torch.Tensor] = []
    with ctx:
        for spec in specs:
            op = _resolve(spec.op)
            tensors = [torch.empty_strided(t["shape"], t["stride"], dtype=getattr(torch, t["dtype"]))
                       for t in spec.tensor_args]
            kwargs = {k: _decode(v, tensors, inputs, out) for k, v in spec.kwargs.items()}
            result = op(*_decode(spec.args, tensors, inputs, out), **kwargs)
            out.extend(result if spec.outputs else [result])
    return out


def _resolve(name: str) -> Any:
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)

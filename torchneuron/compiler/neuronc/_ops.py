"""Op facts the passes share: categories, engines, sizes, def/use maps, dot shapes.

One table per question (is it elementwise? which engine? how many bytes?) so that the
passes agree with each other and with the eager baseline in ``_work``.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from torchneuron.compiler.stablehlo import Function, Operation, TensorType

# ---- categories (short op names, without the "stablehlo."/"chlo." prefix) ----------------

TRANSCENDENTAL = frozenset(
    "exponential exponential_minus_one log log_plus_one logistic tanh rsqrt sqrt cbrt power "
    "sine cosine tan atan2 erf erf_inv erfc asin acos atan sinh cosh asinh acosh atanh lgamma "
    "digamma".split()
)
VECTOR_ELEMENTWISE = frozenset(
    "add subtract multiply divide maximum minimum negate abs compare select clamp and or xor "
    "not sign floor ceil round_nearest_even round_nearest_afz remainder convert is_finite "
    "shift_left shift_right_arithmetic shift_right_logical popcnt count_leading_zeros real imag "
    "complex reduce_precision".split()
)
LAYOUT = frozenset("reshape bitcast_convert broadcast_in_dim broadcast transpose".split())
DATA_MOVE = frozenset("concatenate pad slice reverse".split())
REDUCE = frozenset("reduce reduce_window".split())
CONTRACTION = frozenset("dot_general dot convolution".split())
GPSIMD = frozenset(
    "gather scatter sort iota dynamic_slice dynamic_update_slice rng rng_bit_generator "
    "select_and_scatter dynamic_iota".split()
)
FREE = frozenset("reshape bitcast_convert".split())
CONSTANT_OPS = frozenset({"stablehlo.constant", "arith.constant"})
RETURN_OPS = frozenset({"func.return", "stablehlo.return", "return"})
SIDE_EFFECTING = frozenset(
    "custom_call send recv infeed outfeed all_reduce all_gather all_to_all reduce_scatter "
    "collective_permute rng_bit_generator optimization_barrier".split()
)

# Fusion kinds: "elementwise" (vector+scalar), "layout", "data", "reduce", "contraction",
# "isolated" (own kernel: gather/scatter/sort/while/custom_call/unknown).
FUSABLE_KINDS = frozenset({"elementwise", "layout", "data"})

DTYPE_BYTES: dict[str, int] = {
    "f64": 8,
    "f32": 4,
    "tf32": 4,
    "bf16": 2,
    "f16": 2,
    "i1": 1,
    "i8": 1,
    "ui8": 1,
    "i16": 2,
    "ui16": 2,
    "i32": 4,
    "ui32": 4,
    "i64": 8,
    "ui64": 8,
    "complex<f32>": 8,
    "complex<f64>": 16,
}

PARTITIONS = 128


def short(name: str) -> str:
    """``stablehlo.add`` -> ``add``: tables are keyed by the dialect-free name."""
    return name.rsplit(".", 1)[-1]


def is_constant(op: Operation) -> bool:
    """Constants are data, not kernels: they live in HBM (or are splat immediates)."""
    return op.name in CONSTANT_OPS


def is_return(op: Operation) -> bool:
    """The terminator carries the program's outputs and never becomes a kernel."""
    return op.name in RETURN_OPS


def is_compute(op: Operation) -> bool:
    """Ops that would be a kernel (or part of one): everything but constants and return."""
    return not is_constant(op) and not is_return(op)


@functools.lru_cache(maxsize=4096)
def _costed(config: str) -> dict[str, Any] | None:
    found = json.loads(config).get("costed") if config.startswith("{") else None
    return found if isinstance(found, dict) else None


def eager_cost(op: Operation) -> dict[str, Any] | None:
    """The ``costed`` form of a custom call that runs eager's own kernel for an aten op
    (``decomp/eager_kernels``: fusion kind, vector and scalar passes per element), else
    None. Such a call fuses and costs as the op it stands for, not as an opaque kernel."""
    if short(op.name) != "custom_call":
        return None
    config = op.attributes.get("backend_config")
    return _costed(config) if isinstance(config, str) else None


def kind(op: Operation) -> str:
    """Fusion category of an op (see module docstring)."""
    s = short(op.name)
    if s == "custom_call" and (costed := eager_cost(op)) is not None:
        return str(costed["kind"])
    if s in TRANSCENDENTAL or s in VECTOR_ELEMENTWISE:
        return "elementwise"
    if s in LAYOUT:
        return "layout"
    if s in DATA_MOVE or s == "iota":  # iota: a generator, fused as an index producer
        return "data"
    if s in REDUCE:
        return "reduce"
    if s in CONTRACTION:
        return "contraction"
    return "isolated"


def is_side_effecting(op: Operation) -> bool:
    """DCE must keep these even when their results are unused (a call of eager's kernel
    for an aten op has no side effect)."""
    if eager_cost(op) is not None:
        return False
    return short(op.name) in SIDE_EFFECTING or op.name.startswith("func.call")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element; unknown float8 variants and the like count as one byte."""
    if dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype]
    m = re.search(r"(\d+)", dtype)
    return max(1, int(m.group(1)) // 8) if m else 4


def numel(t: TensorType) -> int:
    """Element count (a rank-0 tensor holds one element)."""
    return math.prod(t.shape) if t.shape else 1


def nbytes(t: TensorType) -> int:
    """Bytes of a dense tensor of this type."""
    return numel(t) * dtype_bytes(t.dtype)


def row_blocks(t: TensorType) -> int:
    """How many 128-partition blocks a value streams through: rows = all dims but the last."""
    rows = math.prod(t.shape[:-1]) if len(t.shape) >= 2 else 1
    return max(1, -(-rows // PARTITIONS))


def value_types(fn: Function) -> dict[str, TensorType]:
    """Type of every SSA value (function args and op results) by name."""
    types = dict(fn.args)
    for op in fn.body:
        types.update(zip(op.results, op.result_types, strict=False))
    return types


def definitions(fn: Function) -> dict[str, int]:
    """Value name -> index of the op that defines it (args are absent)."""
    return {r: i for i, op in enumerate(fn.body) for r in op.results}


def _region_operands(op: Operation) -> Iterable[str]:
    for region in op.regions:
        for inner in region:
            yield from inner.operands
            yield from _region_operands(inner)


def all_operands(op: Operation) -> list[str]:
    """Operands plus values captured by nested regions, so uses are never undercounted."""
    return list(op.operands) + list(_region_operands(op))


def users(fn: Function) -> dict[str, list[int]]:
    """Value name -> indices of the ops that read it (the return op included)."""
    out: dict[str, list[int]] = {}
    for i, op in enumerate(fn.body):
        for v in dict.fromkeys(all_operands(op)):
            out.setdefault(v, []).append(i)
    return out


def _find_pair(attrs: Any, needle: str) -> tuple[list[int], list[int]] | None:
    """(lhs, rhs) lists of the first ``*needle*`` fields in a nested attribute dict.

    Accepts the parser's spec-named dict (``lhs_contracting_dimensions``...), a pair
    ``[[1], [0]]`` or the printed form ``"[1] x [0]"``.
    """
    if isinstance(attrs, dict):
        lhs = [v for k, v in attrs.items() if needle in str(k) and "lhs" in str(k)]
        rhs = [v for k, v in attrs.items() if needle in str(k) and "rhs" in str(k)]
        if lhs and rhs and isinstance(lhs[0], list) and isinstance(rhs[0], list):
            return [int(x) for x in lhs[0]], [int(x) for x in rhs[0]]
        for key, val in attrs.items():
            if needle in str(key):
                pair = _as_pair(val)
                if pair is not None:
                    return pair
        for val in attrs.values():
            hit = _find_pair(val, needle)
            if hit is not None:
                return hit
    return None


def _as_pair(val: Any) -> tuple[list[int], list[int]] | None:
    if isinstance(val, (list, tuple)) and len(val) == 2 and all(isinstance(v, list) for v in val):
        return [int(x) for x in val[0]], [int(x) for x in val[1]]
    if isinstance(val, str):
        groups = re.findall(r"\[([\d,\s]*)\]", val)
        if len(groups) == 2:
            a, b = ([int(x) for x in g.split(",") if x.strip()] for g in groups)
            return a, b
    return None


def dot_dims(op: Operation) -> tuple[list[int], list[int], list[int], list[int]]:
    """(lhs_batch, rhs_batch, lhs_contracting, rhs_contracting) of a dot_general.

    The parser's attribute spelling is read leniently; without attributes we assume a
    plain 2-D matmul (contract lhs's last dim with rhs's first).
    """
    lhs_rank = len(op.operand_types[0].shape)
    contracting = _find_pair(op.attributes, "contracting")
    batching = _find_pair(op.attributes, "batch")
    lb, rb = batching if batching else ([], [])
    lc, rc = contracting if contracting else ([max(lhs_rank - 1, 0)], [len(rb)])
    return lb, rb, lc, rc


def matmul_shape(op: Operation) -> tuple[int, int, int, int]:
    """(batch, m, k, n) that TensorE sees for a dot_general/dot/convolution."""
    out = numel(op.result_types[0])
    lhs, rhs = op.operand_types[0], op.operand_types[1]
    if short(op.name) == "convolution":
        # Implicit GEMM: n = output features (rhs dim 0 in OIHW), k = the rest of rhs.
        n = rhs.shape[0] if rhs.shape else 1
        k = numel(rhs) // max(n, 1)
        return 1, max(out // max(n, 1), 1), max(k, 1), max(n, 1)
    lb, _rb, lc, rc = dot_dims(op)
    batch = math.prod(lhs.shape[d] for d in lb) if lb else 1
    k = math.prod(lhs.shape[d] for d in lc) if lc else 1
    m = numel(lhs) // max(batch * k, 1)
    n = numel(rhs) // max(batch * math.prod(rhs.shape[d] for d in rc) if rc else batch, 1)
    return batch, max(m, 1), max(k, 1), max(n, 1)


def is_splat_constant(op: Operation) -> bool:
    """A constant whose elements are all equal: a memset on chip, no HBM read."""
    if not is_constant(op):
        return False
    if numel(op.result_types[0]) <= 1:
        return True
    val = op.attributes.get("value")
    return isinstance(val, dict) and "splat" in val

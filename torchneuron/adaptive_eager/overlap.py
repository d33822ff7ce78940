"""Whether two strided views of one storage share an element, decided exactly.

Why exact: a region's inputs on one storage are independent values to its executable only
when a write through one can never be seen through another (``replay._aliased``). The
extents of two views (first to last element reachable) say "apart" for views laid out one
after the other (DDP's gradient buckets), but interleaved views meet in their extents
while sharing no element: the three gate chunks of one GRU projection (columns 0-31,
32-63 and 64-95 of an (8, 96) matrix) each span nearly the whole matrix. Refusing those
made every step of ``nn.GRU`` on the CPU's code path side-exit.

The question is whether the difference of the two offsets is a sum ``c_1 * g_1 + ...``
over the distinct strides ``g`` (in bytes) with each coefficient in the range the two
views' sizes allow: a bounded integer search, outermost stride first, where each stride
leaves only the coefficients that the inner strides can still complete. Slices of
contiguous tensors leave one or two candidates per stride; a search that grows past a
small budget answers "they meet", which is always safe (the region runs eagerly).

Imports torch only.
"""

from __future__ import annotations

import torch

__all__ = ["extent", "meet", "whole_vector_rows"]

_BUDGET = 512  # search nodes before answering "they meet" (safe, never wrong)
# bytes of two vectors of the widest vector build (AVX-512): ATen's elementwise loops
# take runs in pairs of vectors and finish a run's remainder in a scalar loop
_VECTOR_PAIR_BYTES = 128


def extent(t: torch.Tensor) -> tuple[int, int]:
    """The elements of its storage ``t`` can reach: [first, last] (empty: (0, -1))."""
    if t.numel() == 0:
        return 0, -1
    lo = hi = t.storage_offset()
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    return lo, hi


def _add_dims(ranges: dict[int, list[int]], t: torch.Tensor, sign: int) -> None:
    """Add ``t``'s dimensions (byte strides, and its bytes within one element) to
    ``ranges``: stride -> [lowest, highest] coefficient, ``sign`` -1 for the other side."""
    item = t.dtype.itemsize
    dims = [(size, stride * item) for size, stride in zip(t.shape, t.stride(), strict=True)]
    dims.append((item, 1))
    for size, stride in dims:
        if size == 1 or stride == 0:
            continue
        step = (size - 1) * sign
        if stride < 0:
            stride, step = -stride, -step
        r = ranges.setdefault(stride, [0, 0])
        if step > 0:
            r[1] += step
        else:
            r[0] += step


def meet(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b``, two views of one storage, can reach a common byte.

    Exact for every layout the search budget covers; beyond it, True (assume they meet)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    (alo, ahi), (blo, bhi) = extent(a), extent(b)
    ia, ib = a.dtype.itemsize, b.dtype.itemsize
    if alo * ia > bhi * ib + ib - 1 or blo * ib > ahi * ia + ia - 1:
        return False  # apart in their extents: the common case, no search
    ranges: dict[int, list[int]] = {}
    _add_dims(ranges, a, 1)
    _add_dims(ranges, b, -1)
    groups = sorted(ranges.items(), reverse=True)  # outermost stride first
    # reach[k]: the lowest and highest sums the strides after k can still add
    reach = [(0, 0)] * (len(groups) + 1)
    for k in range(len(groups) - 1, -1, -1):
        g, (lo, hi) = groups[k]
        low, high = reach[k + 1]
        reach[k] = (low + lo * g, high + hi * g)
    target = b.storage_offset() * ib - a.storage_offset() * ia
    budget = [_BUDGET]

    def solvable(k: int, rest: int) -> bool:
        if k == len(groups):
            return rest == 0
        budget[0] -= 1
        if budget[0] < 0:
            return True  # too many layouts to try: assume they meet
        g, (lo, hi) = groups[k]
        low, high = reach[k + 1]
        first = max(lo, -((high - rest) // g))  # ceil((rest - high) / g)
        last = min(hi, (rest - low) // g)
        return any(solvable(k + 1, rest - c * g) for c in range(first, last + 1))

    return solvable(0, target)


def whole_vector_rows(t: torch.Tensor) -> bool:
    """Whether ATen's elementwise loops over ``t`` run only their vector body, as over a
    contiguous copy of it: ``t`` is contiguous, or each innermost contiguous run of it
    is a whole number of vector pairs at every vector width (128 bytes).

    Why: the executable reads its inputs as contiguous copies, and runs eager's own
    kernel for ``sigmoid``, ``exp`` ... on them. Over an (8, 8) chunk of a (8, 24) matrix
    eager runs eight short rows, each in the scalar loop (``std::exp``, not SLEEF's vector
    exp: other bits), while the copy's 64 elements go through the vector body."""
    if t.is_contiguous():
        return True
    run = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride()), strict=True):
        if size == 1:
            continue
        if stride != run:
            break
        run *= size
    return run * t.dtype.itemsize % _VECTOR_PAIR_BYTES == 0

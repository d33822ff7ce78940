"""``adaptive_eager.overlap``: whether two views of one storage share an element, exactly.

Why: ``replay._aliased`` admits inputs on one storage as independent when they share no
element; an answer "apart" for views that do meet would let a write be missed (a wrong
number), so ``meet`` is checked against the elements themselves on random views, and on
the case that motivated it (a GRU's gate chunks, interleaved column blocks).
"""

from __future__ import annotations

import itertools
import random

import torch

from torchneuron.adaptive_eager.overlap import meet, whole_vector_rows


def _bytes(t: torch.Tensor) -> set[int]:
    item = t.dtype.itemsize
    out: set[int] = set()
    for ix in itertools.product(*[range(n) for n in t.shape]):
        p = (t.storage_offset() + sum(i * s for i, s in zip(ix, t.stride(), strict=True))) * item
        out.update(range(p, p + item))
    return out


def _view(base: torch.Tensor, rng: random.Random) -> torch.Tensor:
    n = base.numel()
    while True:
        shape = [rng.randint(0, 5) for _ in range(rng.randint(0, 3))]
        stride = [rng.choice([0, 1, 2, 3, 4, 6, 8, 12]) for _ in shape]
        reach = sum((s - 1) * st for s, st in zip(shape, stride, strict=True) if s > 0)
        if reach < n:
            return base.as_strided(shape, stride, rng.randint(0, n - 1 - reach))


def test_meet_is_exact_on_random_views() -> None:
    rng = random.Random(0)
    wrong = []
    for _ in range(1500):
        base = torch.zeros(48)
        a = _view(base, rng)
        other = base.view(rng.choice([torch.float32, torch.float16, torch.int8, torch.float64]))
        b = _view(other, rng)
        want = bool(_bytes(a) & _bytes(b))
        if meet(a, b) != want:
            wrong.append((a.shape, a.stride(), a.storage_offset(), b.shape, b.stride(),
                          b.storage_offset(), b.dtype, want))
    assert not wrong, wrong[:5]


def test_gate_chunks_are_apart_and_a_chunk_meets_its_matrix() -> None:
    gates = torch.zeros(8, 96)
    r, z, n = gates.unsafe_chunk(3, 1)
    assert not meet(r, z) and not meet(z, n) and not meet(r, n)
    assert meet(r, r) and meet(gates, n) and meet(gates[3], z)
    assert meet(gates.t(), gates[:, 5])


def test_whole_vector_rows() -> None:
    assert whole_vector_rows(torch.zeros(8, 96).unsafe_chunk(3, 1)[1])  # 32 floats a row
    assert not whole_vector_rows(torch.zeros(8, 24).unsafe_chunk(3, 1)[1])  # 8 floats
    assert whole_vector_rows(torch.zeros(5, 3))  # contiguous

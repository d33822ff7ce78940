"""Random draws follow the memory layout eager's kernel fills (random_ops, decompositions).

ATen's in-place fills (``bernoulli_``, ``uniform_``...) walk memory in order, so which
element gets which draw depends on the strides of the tensor being filled; dropout
fills ``empty_like(x)``, which keeps x's strides. A compiled graph must draw into the
same layout, or refuse.
"""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler.errors import PrepareError
from torchneuron.compiler.prepare.graph import prepare

_LAYOUTS = {
    "contiguous": lambda: torch.randn(6, 10),
    "transposed": lambda: torch.randn(10, 6).t(),
    "permuted-3d": lambda: torch.randn(3, 5, 4).permute(2, 0, 1),
    "sliced": lambda: torch.randn(6, 20)[:, ::2],
}


def _run_both(fn, x: torch.Tensor, seed: int = 3) -> tuple[object, object]:
    pg = prepare(fn, [x])
    torch.manual_seed(seed)
    want = fn(x)
    torch.manual_seed(seed)
    got = pg.run_reference([x])
    return got, want


@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_native_dropout_draws_into_the_inputs_layout(layout: str) -> None:
    x = _LAYOUTS[layout]()
    (out, mask), (want_out, want_mask) = _run_both(
        lambda t: torch.ops.aten.native_dropout(t, 0.4, True), x)
    assert torch.equal(mask, want_mask)
    assert torch.equal(out, want_out)


def test_cpu_functional_dropout_of_a_contiguous_tensor_matches_eager() -> None:
    got, want = _run_both(lambda t: torch.nn.functional.dropout(t * 2, 0.25), torch.randn(6, 10))
    assert torch.equal(got, want)


@pytest.mark.parametrize("layout", ["transposed", "permuted-3d"])
def test_cpu_functional_dropout_of_a_transposed_tensor_is_refused(layout: str) -> None:
    """Traced on CPU, PyTorch's dropout becomes ``bernoulli.p(empty([]).expand(shape))``
    (contiguous draws) where eager filled ``empty_like(x)`` in x's layout: refused."""
    with pytest.raises(PrepareError) as info:
        prepare(lambda t: torch.nn.functional.dropout(t * 2, 0.25), [_LAYOUTS[layout]()])
    assert info.value.reason == "random-op-layout"


def test_in_place_uniform_on_a_transposed_tensor_matches_eager() -> None:
    got, want = _run_both(lambda t: torch.empty_like(t).uniform_() + t, _LAYOUTS["transposed"]())
    assert torch.equal(got, want)


def test_bernoulli_p_on_a_non_contiguous_tensor_is_refused() -> None:
    """torch.bernoulli(x, p) draws contiguously, x.bernoulli_(p) in x's layout: after
    functionalization both are the same node, so the graph is refused, not guessed."""
    with pytest.raises(PrepareError) as info:
        prepare(lambda t: torch.bernoulli(t, 0.3), [_LAYOUTS["transposed"]()])
    assert info.value.reason == "random-op-layout"
    assert info.value.op == "aten.bernoulli.p"
    prepare(lambda t: torch.bernoulli(t, 0.3), [_LAYOUTS["contiguous"]()])  # accepted


def test_cpu_alpha_dropout_of_a_contiguous_tensor_matches_eager() -> None:
    """Alpha dropout scales the mask by numbers before and after combining it with x."""
    got, want = _run_both(lambda t: torch.nn.functional.alpha_dropout(t, 0.5, True),
                          _LAYOUTS["contiguous"]())
    assert torch.equal(got, want)


@pytest.mark.parametrize("layout", ["transposed", "permuted-3d"])
def test_cpu_alpha_dropout_of_a_transposed_tensor_is_refused(layout: str) -> None:
    with pytest.raises(PrepareError) as info:
        prepare(lambda t: torch.nn.functional.alpha_dropout(t * 2, 0.5, True), [_LAYOUTS[layout]()])
    assert info.value.reason == "random-op-layout"

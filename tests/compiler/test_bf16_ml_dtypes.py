"""What the exact lowering sweep in bfloat16 found once ``ml_dtypes`` was installed (session
13): Torch-MLIR's importer writes an empty or one-element bfloat16 constant through that
package, so without it every graph holding one was refused (``lower:lowering-failed``) and
with it those graphs compile. Each case is compared with eager CPU bit for bit, and each
failed on the code before (with ``ml_dtypes`` installed):

- a bfloat16 ``embedding_bag`` sum or mean without per-sample weights on ATen's fast path
  (no ``padding_idx``, contiguous rows): eager sums with FBGEMM in float32 in an order of
  its own and rounds once; the decomposition's sum was off in the last bit (the sweep: 13
  of 37 samples; here 3 of 32 elements). Refused (``bfloat16-bag-sum``); with a
  ``padding_idx`` ATen's own loop sums in index order in float32, which the decomposition
  gives.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import matches_eager, torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph


def _bag_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(20, 8, generator=g) * 3).to(torch.bfloat16)
    indices = torch.randint(0, 20, (40,), generator=g)
    return weight, indices, torch.tensor([0, 5, 17, 30])


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_bfloat16_embedding_bag_sum_is_refused(mode: str) -> None:
    weight, indices, offsets = _bag_inputs()
    fn = lambda w, i, o: F.embedding_bag(i, w, o, mode=mode)  # noqa: E731
    with pytest.raises(CompileError) as info:
        compile_graph(fn, [weight, indices, offsets])
    assert info.value.reason == "bfloat16-bag-sum", info.value
    torch_compile_matches_eager(fn, weight, indices, offsets)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_bfloat16_embedding_bag_with_padding_idx_is_eagers(mode: str) -> None:
    pytest.importorskip("ml_dtypes", reason="Torch-MLIR writes the bag's bfloat16 zeros "
                        "through ml_dtypes; without it the graph is refused")
    weight, indices, offsets = _bag_inputs()
    matches_eager(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=0),
                  weight, indices, offsets)

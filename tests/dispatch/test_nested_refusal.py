"""Ops that make nested tensors are refused with what to do, not PyTorch's internal error.

``nn.TransformerEncoder`` in eval mode under no_grad with a ``src_key_padding_mask`` packs
the batch into a nested tensor (its inference fast path); a neuron tensor cannot hold one,
and the op failed with "Internal error: NestedTensorImpl doesn't support sizes. Please
file an issue." The error now names the op and the switch that keeps the dense path, and
with that switch the encoder gives CPU's values at every unpadded position.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchneuron  # noqa: F401  (registers the device)


def _encoder(nested: bool) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=nested).eval()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(2, 4, 8)
    pad = torch.tensor([[False, False, True, True], [False, False, False, False]])
    return x, pad


def test_encoder_fast_path_says_how_to_avoid_nested_tensors() -> None:
    enc = _encoder(nested=True).to("neuron")
    x, pad = _inputs()
    with torch.no_grad(), pytest.raises(NotImplementedError, match="enable_nested_tensor=False"):
        enc(x.to("neuron"), src_key_padding_mask=pad.to("neuron"))


def test_encoder_dense_path_matches_cpu_at_unpadded_positions() -> None:
    x, pad = _inputs()
    with torch.no_grad():
        want = _encoder(nested=True)(x, src_key_padding_mask=pad)
        got = _encoder(nested=False).to("neuron")(x.to("neuron"),
                                                  src_key_padding_mask=pad.to("neuron"))
    torch.testing.assert_close(got.cpu()[~pad], want[~pad], rtol=1e-5, atol=1e-6)

"""Kernels written in the NKI dialect, each tested against PyTorch on CPU.

``norms`` (RMSNorm, LayerNorm, softmax), ``attention`` (FlashAttention forward and
backward), ``moe`` (a mixture-of-experts block), ``mx`` (an MXFP8 matmul for trn3), ``mx_linear`` (MXFP8 training of ``nn.Linear``);
``ops`` exposes them as PyTorch ops (``nki_lib::``) usable on neuron tensors in eager,
under torch.compile and under adaptive eager.
"""

from .mx import mxfp8_matmul_kernel
from .mx_linear import MXFP8Linear, convert_to_mxfp8, mxfp8_linear
from .ops import flash_attention, layer_norm, moe, rms_norm, softmax

__all__ = ["MXFP8Linear", "convert_to_mxfp8", "flash_attention", "layer_norm", "moe",
           "mxfp8_linear", "mxfp8_matmul_kernel", "rms_norm", "softmax"]

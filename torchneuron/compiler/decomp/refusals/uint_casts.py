"""float -> uint32 casts are refused: eager's CPU result depends on where the element sits.

Eager's CPU conversion of a float to uint32 runs two different x86 sequences. Its
vectorised loop (the AVX2 build: blocks of 2 x 8 float32 or 2 x 4 float64 elements)
converts ``x < 2**31 ? cvttps2dq(x) : cvttps2dq(x - 2**31) ^ 2**31``; its scalar loop
(the tail of each block run, a non-contiguous input, a one-element tensor) converts to
int64 and keeps the low 32 bits. The two agree on (-2**31 - 1, 2**32) and differ outside:
NaN gives 2147483648 in the first and 0 in the second, -3e9 gives 2147483648 against
1294967296, 5e9 gives 0 against 705032704. Which loop an element meets depends on the
tensor's length, layout, thread split and the CPU's instruction set, not on the graph, so
no single lowering reproduces eager; a graph holding such a cast runs eagerly instead.

uint16 and uint64 follow one rule in both loops (uint16: through int32 and wrap; uint64:
the ``x >= 2**63`` split above, in 64 bits), but this Torch-MLIR does not lower either
dtype, so those graphs are refused at lowering already (``LoweringError``).
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchneuron.compiler.errors import PrepareError

__all__ = ["refuse_float_to_uint32"]


def refuse_float_to_uint32(gm: fx.GraphModule) -> None:
    """Raise ``PrepareError(reason="float-to-uint32")`` if a node makes a uint32 tensor
    from a floating-point tensor argument (``_to_copy``, ``convert_element_type``, the
    write-back ``copy`` into a uint32 input)."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(val, torch.Tensor) \
                or val.dtype != torch.uint32:
            continue
        for arg in node.all_input_nodes:
            src = arg.meta.get("val")
            if isinstance(src, torch.Tensor) and src.dtype.is_floating_point:
                raise PrepareError(
                    f"{node.target}: eager converts a float to uint32 differently in its "
                    "vectorised loop and its scalar tail (NaN, infinities and values outside "
                    "(-2**31 - 1, 2**32) differ), so no lowering matches it; this region "
                    "runs eagerly. Cast through int64 (x.long().to(torch.uint32)) for one "
                    "defined result.", op=str(node.target), reason="float-to-uint32")

"""PyTorch's own Python custom ops, traced through the Python that implements them.

``F.linear_cross_entropy`` with chunking options calls ``torch_nn::`` custom ops
(``torch.library.custom_op``), which tracing keeps as opaque nodes. They have no lowering,
and the compile worker, a fresh process, cannot even unpickle a graph naming them (the
module registering them is imported lazily by ``F.linear_cross_entropy``). Their
implementation is ordinary torch code (chunked matmuls, log-sum-exp, in-place updates
that functionalization turns pure), so each entry here runs it while tracing: the graph
holds the ops that eager's implementation runs, in the same chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["custom_op_decompositions"]


def custom_op_decompositions() -> dict[Any, Callable[..., Any]]:
    """Entries for the ``torch_nn::`` custom ops (imports the module that registers them)."""
    from torch.nn.modules import linear_cross_entropy as lce

    accumulate = lce._linear_cross_entropy_batch_chunked_accumulator

    def chunked(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
                linear_bias: torch.Tensor | None, weight: torch.Tensor | None, reduction: str,
                ignore_index: int, label_smoothing: float, batch_chunk_size: int,
                acc_policy: str, acc_dtype: torch.dtype, allow_retain_graph: bool,
                compute_input_grad: bool, compute_linear_weight_grad: bool,
                compute_linear_bias_grad: bool) -> Any:
        """The op's body without its runtime requires_grad guards (a traced graph has no
        autograd state to check): loss and the precomputed gradients."""
        return accumulate(input, linear_weight, target, linear_bias, weight, reduction,
                          ignore_index, label_smoothing, batch_chunk_size, acc_policy,
                          acc_dtype, compute_input_grad, compute_linear_weight_grad,
                          compute_linear_bias_grad)

    def chunked_no_reduction(input: torch.Tensor, linear_weight: torch.Tensor,
                             target: torch.Tensor, linear_bias: torch.Tensor | None,
                             weight: torch.Tensor | None, ignore_index: int,
                             batch_chunk_size: int, acc_policy: str,
                             acc_dtype: torch.dtype) -> torch.Tensor:
        """The op's body: the accumulator's loss-only branch."""
        return accumulate(input, linear_weight, target, linear_bias, weight, "none",
                          ignore_index, 0.0, batch_chunk_size, acc_policy, acc_dtype,
                          compute_input_grad=False, compute_linear_weight_grad=False,
                          compute_linear_bias_grad=False)[0]

    ops = torch.ops.torch_nn
    return {ops._linear_cross_entropy_batch_chunked.default: chunked,
            ops._linear_cross_entropy_batch_chunked_no_reduction.default: chunked_no_reduction}

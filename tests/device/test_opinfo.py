"""OpInfo parity for CI: a representative subset of PyTorch's op database, neuron vs CPU.

Why a subset: the full sweep (``python tools/opinfo_device.py``) takes minutes; CI
needs the categories where a device breaks first -- factory functions, views and
``as_strided``, indexing and index tensors, scatter/gather, scalars and lists,
non-tensor returns, in-place variants (on views), ``out=``-style resizes,
conv/pool, linear algebra -- each compared forward, in place and through input
gradients against CPU eager, using the sweep's own checker so the two cannot
drift apart.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import opinfo_device  # noqa: E402

from torchneuron.device.tensor import set_op_handler  # noqa: E402
from torchneuron.dispatch import eager  # noqa: E402

OPS = [
    # elementwise, with scalars and broadcasting (in-place variants run too)
    "add", "mul", "div.no_rounding_mode", "pow", "clamp", "where", "sgn", "lerp",
    "addcmul", "sigmoid", "nn.functional.gelu", "copysign",
    # reductions and scans
    "sum", "mean", "amax", "var", "prod", "logsumexp", "cumsum", "argmax", "norm",
    "softmax", "sort", "topk",
    # views, as_strided, non-contiguous inputs
    "view", "reshape", "transpose", "permute", "expand", "squeeze", "narrow",
    "as_strided", "diagonal", "unfold", "split", "movedim", "t",
    # indexing, tensors of indices, data-dependent shapes
    "__getitem__", "index_select", "index_add", "index_put", "index_fill", "masked_fill",
    "masked_scatter", "masked_select", "take_along_dim", "nonzero", "tensor_split",
    # scatter / gather
    "gather", "scatter", "scatter_add", "scatter_reduce.sum",
    # factory-like, lists of sizes, out= resizing inside composites
    "arange", "linspace", "full_like", "new_full", "eye", "tril", "combinations",
    # metadata mutation
    "resize_", "resize_as_",
    # linear algebra (lite; inv runs as a host fallback)
    "mm", "bmm", "addmm", "einsum", "linalg.vector_norm", "linalg.inv",
    # nn.functional: conv, pool, norms, losses, embedding, padding
    "nn.functional.conv2d", "nn.functional.avg_pool2d", "nn.functional.batch_norm",
    "nn.functional.layer_norm", "nn.functional.embedding", "nn.functional.cross_entropy",
    "nn.functional.pad.constant", "cat", "stack", "flip", "roll",
]  # fmt: skip

_BY_ID = {opinfo_device.op_id(op): op for op in opinfo_device.find_ops(OPS)}


def test_subset_is_complete() -> None:
    """Every listed op exists in this torch's OpInfo database (a rename must not hide it)."""
    assert sorted(set(OPS) - set(_BY_ID)) == []


@pytest.mark.parametrize("name", OPS)
def test_op_matches_cpu(name: str) -> None:
    """Every float32 sample: same outputs, mutated inputs, view metadata and grads as CPU."""
    op = _BY_ID[name]
    r = opinfo_device.check_op(op, grad=True, inplace=True)
    assert r.status == "pass", f"{name}: {r.status}: {r.error or r.reason}"
    assert r.samples > 0
    if op.supports_autograd:
        assert r.grad_status == "pass", f"{name} gradients: {r.grad_status}: {r.grad_error}"


def _corrupting(target: Any) -> Any:
    """An op handler that runs ops normally but perturbs ``target``'s outputs."""

    def handle(func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        out = eager.run_op(func, args, kwargs)
        if func is target:
            out.buffer.add_(1.0)
        return out

    return handle


@pytest.fixture
def restore_handler() -> Any:
    yield
    set_op_handler(lambda func, types, args, kwargs: eager.run_op(func, args, kwargs))


def test_checker_catches_wrong_values(restore_handler: None) -> None:
    """The harness must fail when the device computes a wrong number."""
    set_op_handler(_corrupting(torch.ops.aten.mul.Tensor))
    r = opinfo_device.check_op(_BY_ID["mul"], grad=False, inplace=False)
    assert r.status == "fail" and "not close" in r.error


def test_checker_catches_wrong_gradients(restore_handler: None) -> None:
    """A wrong backward kernel (forward intact) must show up as a gradient failure."""
    set_op_handler(_corrupting(torch.ops.aten.sigmoid_backward.default))
    r = opinfo_device.check_op(_BY_ID["sigmoid"], grad=True, inplace=False)
    assert r.status == "pass" and r.grad_status == "fail"


def test_checker_catches_stale_view_metadata() -> None:
    """A view whose metadata differs from CPU's fails even when its values agree."""
    base = torch.arange(6.0)
    cpu_view = base.view(2, 3).t()  # strides (1, 3)
    dev_copy = base.to("neuron").view(2, 3).t().contiguous()  # same values, strides (2, 1)
    with pytest.raises(AssertionError, match="view metadata"):
        opinfo_device._compare(dev_copy, cpu_view, "out")


def test_unspecified_ops_are_skipped_with_reason() -> None:
    """Ops with unspecified results are listed as skipped, never silently counted."""
    for name in ("empty_like", "bernoulli", "randn_like"):
        (op,) = opinfo_device.find_ops([name])
        r = opinfo_device.check_op(op, grad=False)
        assert r.status == "skipped" and r.reason, name

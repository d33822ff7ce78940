"""What the simulated NeuronCore runs natively, and what falls back to the host.

Trainium's engines have no FP64 or complex datapath, and the Neuron stack runs
dense linear-algebra factorizations, FFTs and ops with data-dependent output
shapes on the host. Such ops still give the exact numbers (they run the same CPU
kernel), but they are charged the device->host and host->device transfers and
counted as fallbacks, as TorchNeuron's ``get_fallback_ops()`` would show them.
"""

from __future__ import annotations

import torch

__all__ = ["fallback_reason", "host_op_reason", "dtype_reason"]

_HOST_DTYPES = {torch.float64, torch.complex64, torch.complex128, torch.complex32}

_HOST_OP_PREFIXES = ("linalg_", "_linalg_", "_fft_", "fft_", "_unique", "unique")
_HOST_OPS = {
    "cholesky", "cholesky_inverse", "cholesky_solve", "triangular_solve", "geqrf",
    "ormqr", "orgqr", "lu_unpack", "_lu_with_info", "svd", "_svd_helper", "qr",
    "inverse", "det", "logdet", "slogdet", "lstsq", "eig", "symeig", "pinverse",
    "matrix_exp", "nonzero", "nonzero_static", "masked_select", "histc", "histogram",
    "bincount", "_histogramdd_from_bin_cts", "_histogramdd_bin_edges",
}  # fmt: skip


def fallback_reason(name: str, tensors: list[torch.Tensor]) -> str | None:
    """The reason op ``name`` runs on the host, or None if the device runs it."""
    return host_op_reason(name) or dtype_reason(tensors)


def host_op_reason(name: str) -> str | None:
    """Why op ``name`` runs on the host whatever its arguments (None: it may not)."""
    if name in _HOST_OPS or name.startswith(_HOST_OP_PREFIXES):
        return "no device kernel (host-only op on Neuron)"
    return None


def dtype_reason(tensors: list[torch.Tensor]) -> str | None:
    """Why an op on ``tensors`` runs on the host because of their dtypes (None: it may not)."""
    for t in tensors:
        if t.dtype in _HOST_DTYPES:
            return f"dtype {t.dtype} has no NeuronCore datapath"
    return None

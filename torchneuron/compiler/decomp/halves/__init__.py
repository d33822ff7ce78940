"""Exact-rounding rules for float16 / bfloat16: each op computed as eager's CPU kernel does,
in its wider type (float32 opmath, float64 where eager uses it) and rounded once.

Owns the half-precision layers and entries: activations (``opmath``), ``mean``
(``half_mean``), scalar multiply / divide (``half_scalar``), variance (``half_var``),
vector norms (``half_norm``), training-mode BatchNorm (``half_batch_norm``) and the last
dim's ``log_softmax`` (``half_log_softmax``). Imports ``decomp.registry`` and
``decomp.host_numerics``.
"""

"""Refusal rules: ops whose eager bits no lowering can match, refused with a typed reason.

Owns the layers and entries that raise ``PrepareError`` (the graph then runs eagerly,
counted): ops whose eager result depends on the CPU's code path (``cpu_dependent``),
float16 / bfloat16 convolutions (``half_conv``), float -> uint32 casts (``uint_casts``) and ops that order ties by
their algorithm (``tie_order``). Imports ``compiler.errors``, ``decomp.registry`` and
``decomp.host_numerics``.
"""

"""Prepare: any callable or FX graph -> a functional core-aten graph ready for Torch-MLIR.

Owns: the trace (``graph.prepare``: functionalize, decompose, legalize), random-op
legalization (``random_ops``), out-of-range index checks (``index_bounds``), the one lock
every FX trace takes (``trace_lock``), device moves as identities (``host_devices``) and
the refusal of custom ops without a lowering (``refuse_custom_ops``), custom ops with a
registered target carried as custom calls (``custom_calls``; those that write their
inputs through ``auto_functionalized``: ``mutating_calls``). Imports ``compiler.errors``,
``compiler.decomp``, the custom-call registry (``compiler.stablehlo.custom_targets``)
and torch; nothing else from the later stages.
"""

"""Prepare: any callable or FX graph -> a functional core-aten graph ready for Torch-MLIR.

Owns: the trace (``graph.prepare``: functionalize, decompose, legalize), random-op
legalization (``random_ops``), out-of-range index checks (``index_bounds``), the one lock
every FX trace takes (``trace_lock``), device moves as identities (``host_devices``) and
the refusal of custom ops without a lowering (``refuse_custom_ops``). Imports
``compiler.errors``, ``compiler.decomp`` and torch; nothing from the later stages.
"""

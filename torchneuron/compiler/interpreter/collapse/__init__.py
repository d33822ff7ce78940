"""Load-time collapses: a run of StableHLO ops that is one torch call runs as that call.

Owns: ``base`` (the ``Collapsed`` op and the block graph every plug-in reads), one
plug-in module per pattern (``window``, ``pool``, ``pool_flat``, ``relu``,
``clamp``, ``nan``, ``pointwise``, ``conv_weight``, ``conv_bias``; ``conv_transpose``, run
by the interpreter before the others) and ``plugins``, the ordered list that tries them.
Plug-ins import ``base`` (never ``plugins``); ``plugins`` imports them all. Imports the
interpreter's registry and specializations, ``compiler.stablehlo`` and torch. The program
is never changed (neuronc's cost model reads it): only how the interpreter runs a block.
"""

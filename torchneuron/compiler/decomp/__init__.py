"""Decompositions: the table ``prepare`` traces with, so every op left lowers and matches eager.

Owns: the one registry (``registry``), the table's assembly (``table``), each family of
ops' own decompositions in a module of its own, the layers that wrap many entries at once
(half-precision rules, refusals, index checks), and what eager's CPU kernels give at
special values (``host_numerics``). Imports ``compiler.errors``, ``compiler.prepare``'s
random-op and index-bound rules, ``dispatch.rnn`` (the fused cells' own kernels) and torch.
"""

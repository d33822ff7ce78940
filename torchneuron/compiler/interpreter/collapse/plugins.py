"""Load-time collapses, in the order they are tried: a run of StableHLO ops that is one
torch call runs as that call.

Why: the lowering spells some single ATen ops as runs of StableHLO ops, and running
them op by op costs far more than the op eager runs. Max-pooling's forward becomes one
strided slice per window position, a concatenate, a reshape and a two-result reduce
(max with its first index, over the window dim); its backward becomes a concatenate
of iotas with the saved index and a scatter-add. On the CNN training loop these runs
took more wall time than the rest of the executable. Here, once per block, each such
run is recognised and replaced by one ``Collapsed`` op computing the run's results from
strided views of the input (one compare and two selects per window position, no
copies; forward) or with one ``scatter_add_`` (backward): ``window``. ``relu`` ReLU's
backward (``threshold_backward``); ``clamp`` ReLU itself and one-sided clamps
(``relu`` / ``clamp_min`` / ``clamp_max``); ``nan`` max-pooling's NaN override (two selects
that give their third operands when the input has no NaN; a collapsed op with two
results); ``pool_flat`` the native pool with the lookup of its flat index (tried first);
``pointwise`` trees of single-use elementwise arithmetic (an optimizer's update), tried
last, on what the others left. ``conv_weight`` is not for speed but for eager's bits: a
convolution's weight (and bias) gradient as eager's own ``convolution_backward``;
``conv_bias`` a convolution and its bias add as eager's ``F.conv*d(x, w, b)``, and
``addmm_bias`` a matrix product and its bias add as eager's ``torch.addmm``;
``conv_transpose_crops`` (tried first) a transposed convolution and the crop after it as
one eager call. (Not to be confused with neuronc's ``fuse`` pass, which
groups the program's ops for the cost model; a collapse changes only how the interpreter
runs a block.)

Rules every collapse keeps:

- Only the run's last op's results may be read outside the run (its inner values are
  used by nobody else, and are not read from nested regions); the collapsed op reads the
  run's outside inputs.
- The collapsed op gives the run's bits. Where the fast call could differ (a NaN in a
  window, an out-of-range index, a window whose maximum loses to the reduce's init
  value), it runs the original ops instead, one by one, as the interpreter would.
- The program itself is untouched: the compiler's cost model reads the program, so
  simulated times do not move.
"""


from __future__ import annotations

from collections.abc import Callable

from torchneuron.compiler.interpreter.collapse.addmm_bias import KEEP, addmm_with_bias
from torchneuron.compiler.interpreter.collapse.base import Body, Collapsed, _Graph
from torchneuron.compiler.interpreter.collapse.clamp import clamp_bound
from torchneuron.compiler.interpreter.collapse.conv_bias import conv_with_bias
from torchneuron.compiler.interpreter.collapse.conv_transpose import conv_transpose_crops
from torchneuron.compiler.interpreter.collapse.conv_weight import conv_weight_grad
from torchneuron.compiler.interpreter.collapse.nan import nan_override
from torchneuron.compiler.interpreter.collapse.pointwise import pointwise_tree
from torchneuron.compiler.interpreter.collapse.pool_flat import max_pool_flat_index
from torchneuron.compiler.interpreter.collapse.relu import relu_backward
from torchneuron.compiler.interpreter.collapse.window import (
    _max_pool_backward,
    _max_pool_forward,
    _one_hot_lookup,
)

__all__ = ["Collapsed", "collapse"]


PLUGINS: tuple[Callable[[_Graph, Body, int], tuple[Collapsed, list[int]] | None], ...] = (
    conv_weight_grad,
    conv_with_bias,
    addmm_with_bias,
    _max_pool_forward,
    _max_pool_backward,
    _one_hot_lookup,
    relu_backward,
    clamp_bound,
    nan_override,
)


# tried on the whole block first: their runs take in runs of the plugins above
EARLY: tuple[Callable[[_Graph, Body, int], tuple[Collapsed, list[int]] | None], ...] = (
    conv_transpose_crops,
    max_pool_flat_index,
)


# tried on what the plugins above left: a tree may end at any elementwise op, and would
# otherwise take in ops a later run of theirs needs
LATE: tuple[Callable[[_Graph, Body, int], tuple[Collapsed, list[int]] | None], ...] = (
    pointwise_tree,
)


def collapse(body: Body, returns: tuple[str, ...] | None, pinned: set[str]) -> Body:
    """``body`` with every recognised run replaced by one ``Collapsed`` op at its last op."""
    for group in (EARLY, PLUGINS, LATE):
        body = _collapse_with(body, returns, pinned, group)
    return body


def _collapse_with(body: Body, returns: tuple[str, ...] | None, pinned: set[str],
                   plugins: tuple[Callable[[_Graph, Body, int], tuple[Collapsed, list[int]] | None],
                                  ...]) -> Body:  # fmt: skip
    g = _Graph(body, returns, pinned)
    replace: dict[int, Collapsed] = {}
    gone: set[int] = set()
    for at in range(len(body)):
        for plugin in plugins:
            hit = plugin(g, body, at)
            # (a run may not take in an op another plug-in has already replaced)
            if hit is not None and not (set(hit[1]) & (gone | replace.keys())):
                collapsed, ids = hit
                if any(r in pinned for i in ids for r in body[i][0].results):
                    continue
                replace[at] = collapsed
                keep = collapsed.attributes.get(KEEP, ())  # (read by others: addmm_bias)
                gone.update(i for i in ids if i != at and i not in keep)
                break
    if not replace:
        return body
    return [
        (replace[i], tuple(replace[i].operands)) if i in replace else body[i]
        for i in range(len(body)) if i not in gone
    ]  # fmt: skip

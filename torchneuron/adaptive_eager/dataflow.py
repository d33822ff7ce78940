"""The dataflow check of one deferred op, generated once per guard.

While a region replays, each op's tensor arguments must be the values the recorded
dataflow says: this replay's pending values, or the region's inputs in order of first use,
each still on the buffer it had then (``Replay._bind``, the general check). That check
loops over the arguments and the recorded flow and branches on each entry's kind, for
every op of every replay, and the loop costs more than the reads it makes.

``generate`` unrolls it for one recorded flow, the expected value ids and input slots
bound as constants, and takes only the common cases: a pending value of this replay whose
value id is the recorded tuple itself (``guard`` shares one tuple per value across a
region), an input seen before on the same buffer, or the next new input (a value of an
earlier replay too, its buffer taken first, and a tensor not seen before, given its id,
as the general check does). Anything else
goes, from the start, to the general check, which decides: the generated check never
accepts what the general one refuses nor refuses what it accepts, and it leaves the same
state behind (a new input it took is found again, on its first buffer, by the general one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchneuron.adaptive_eager.recorder import vid_of

__all__ = ["generate"]

# The function per pattern of kinds ("v": a pending value, "x": an input slot), compiled
# once: the expected ids and slots are arguments of its factory.
_factories: dict[str, Callable[..., Any]] = {}


def generate(flow: tuple, value_type: type, general: Callable[[Any, list, tuple], bool]
             ) -> Callable[[Any, list], bool]:
    """``bind(replay, tensors)``: what ``general(replay, tensors, flow)`` returns, with
    the same effects (new input slots taken).
    ``value_type``: the type of a pending value's producer (``replay._Value``)."""
    kinds = "".join("x" if type(w) is int else "v" for w in flow)
    make = _factories.get(kinds)
    if make is None:
        make = _factories[kinds] = _compile(kinds)
    return make(value_type, general, flow, *flow)


def _compile(kinds: str) -> Callable[..., Any]:
    names = [f"w{j}" for j in range(len(kinds))]
    code = [f"def make(V, general, FLOW{''.join(', ' + n for n in names)}):",
            "    def bind(rp, tensors):",
            f"        if len(tensors) != {len(kinds)}:",
            "            return general(rp, tensors, FLOW)",
            ]
    if "x" in kinds:
        code += ["        slots = rp.slots", "        ext_buffers = rp.ext_buffers"]
    slow = ["            return general(rp, tensors, FLOW)"]
    for j, kind in enumerate(kinds):
        w = names[j]
        code += [f"        t = tensors[{j}]", "        p = t._pending"]
        if kind == "v":
            code += [f"        if type(p) is not V or p.replay is not rp or p.ik is not {w}:",
                     *slow]
        else:  # (a value of an earlier, ended replay: its buffer taken now, as there)
            code += ["        if type(p) is V:",
                     "            if p.replay is rp:",
                     "    " + slow[0],
                     "            t.buffer",
                     "        buf = t._buffer",
                     "        if buf is None:",
                     *slow,
                     "        v = t.__dict__.get('_ae_vid')",
                     "        vid = v[0] if v is not None and v[1] == id(t) else vid_of(t)",
                     "        slot = slots.get(vid)",
                     "        if slot is None:",
                     f"            if len(slots) != {w} or t._device_index != rp.index:",
                     "    " + slow[0],
                     f"            slots[vid] = {w}",
                     "            rp.ext.append(t)",
                     "            ext_buffers.append(buf)",
                     f"        elif slot != {w} or buf is not ext_buffers[slot]:",
                     *slow]
    code += ["        return True", "    return bind"]
    ns: dict[str, Any] = {"vid_of": vid_of}
    exec(compile("\n".join(code), f"<dataflow check {kinds}>", "exec"), ns)  # noqa: S102
    return ns["make"]

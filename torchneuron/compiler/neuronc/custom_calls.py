"""A ``stablehlo.custom_call`` carrying a cost plan is a kernel costed by that plan.

Why: a custom call is a kernel the compiler did not write (an NKI kernel): its time is
its own instruction schedule, computed when the call was carried (``compiler/
custom_call.py``: the target's ``plan``) and stored in its ``backend_config``. The call
is a kernel of its own (``fuse`` isolates custom calls); ``allocate`` takes its work
from the plan (its matmuls and HBM bytes, for the roofline and traffic totals) and
``schedule`` its engine times, fixed cost and total instead of deriving them, so the
program is charged the kernel's own schedule and other kernels overlap it on free
engines. A plan made for another hardware profile is refused, never rescaled.
"""

from __future__ import annotations

import json
from typing import Any

from torchneuron.compiler.stablehlo import Operation
from torchneuron.hardware import ENGINES, HardwareProfile, KernelCost, KernelWork

from ._ops import short

__all__ = ["plan_of", "planned_work", "planned_cost"]


def plan_of(ops: list[Operation]) -> dict[str, Any] | None:
    """The plan of a kernel made of one custom call that carries one, else None."""
    if len(ops) != 1 or short(ops[0].name) != "custom_call":
        return None
    config = ops[0].attributes.get("backend_config")
    if not isinstance(config, str) or not config.startswith("{"):
        return None
    plan = json.loads(config).get("plan")
    return plan if isinstance(plan, dict) else None


def planned_work(plan: dict[str, Any]) -> KernelWork:
    """The kernel's work as the roofline and traffic totals count it."""
    return KernelWork(matmuls=[(int(c), int(m), int(k), int(n), str(d))
                               for c, m, k, n, d in plan.get("matmuls", [])],
                      hbm_read_bytes=int(plan.get("hbm_bytes", 0)))


def planned_cost(plan: dict[str, Any], profile: HardwareProfile) -> KernelCost:
    """The kernel's schedule as a ``KernelCost``; raises if planned for another profile."""
    if plan.get("profile") != profile.name:
        raise ValueError(f"a custom call's cost was planned for {plan.get('profile')}, and "
                         f"the program is compiled for {profile.name}: compile it with "
                         f"{profile.name} as the current hardware")
    engine_ns = {e: int(plan["engine_ns"].get(e, 0)) for e in ENGINES}
    return KernelCost(engine_ns, int(plan["fixed_ns"]),
                      int(plan["total_ns"]), int(plan["roofline_ns"]), str(plan["bound"]))

"""The compiler's program: the StableHLO module plus the annotations each pass adds.

Passes share this one mutable-by-replacement record: ``dce``/``constant_fold`` rewrite
the entry function's ops; ``fuse`` groups them into ``Kernel``s; later passes fill in
engines, tiles, SBUF/PSUM bytes, work, cost and schedule. Everything serializes to
plain JSON (the executable stores it and must load without running code: no pickle).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from torchneuron.compiler.stablehlo import Function, Module, Operation
from torchneuron.hardware import KernelWork

FORMAT_VERSION = 1


def work_to_dict(work: KernelWork | None) -> dict[str, Any] | None:
    """KernelWork as JSON (matmul tuples become lists)."""
    if work is None:
        return None
    d = dataclasses.asdict(work)
    d["matmuls"] = [list(m) for m in work.matmuls]
    return d


def work_from_dict(d: dict[str, Any] | None) -> KernelWork | None:
    """Inverse of ``work_to_dict``."""
    if d is None:
        return None
    d = dict(d)
    d["matmuls"] = [tuple(m) for m in d.get("matmuls", [])]
    return KernelWork(**d)


@dataclass
class Kernel:
    """One device kernel: a group of StableHLO ops run as a unit with one HBM round trip.

    ``op_indices`` index the entry function's body (after dce/constant_fold). Lists named
    per op (``engines``, ``tiles``) are parallel to ``op_indices``. ``inputs``/``outputs``
    are the SSA values crossing the kernel boundary (the only ones touching HBM, besides
    spills). ``cost`` holds the ``KernelCost`` fields as a plain dict.
    """

    name: str
    op_indices: list[int]
    kind: str = "elementwise"
    engines: list[str] = field(default_factory=list)
    tiles: list[dict[str, int]] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    work: KernelWork | None = None
    sbuf_bytes: int = 0
    psum_bytes: int = 0
    spill_bytes: int = 0
    cost: dict[str, Any] = field(default_factory=dict)
    start_ns: int = 0
    end_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; ``from_dict`` restores an equal Kernel."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["work"] = work_to_dict(self.work)
        d["tiles"] = [dict(t) for t in self.tiles]
        d["cost"] = dict(self.cost)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Kernel:
        """Inverse of ``to_dict``."""
        d = dict(d)
        d["work"] = work_from_dict(d.get("work"))
        return cls(**d)


@dataclass
class ProgramCost:
    """Totals of a compiled program, and what op-by-op (eager) execution would cost.

    ``eager_*`` count one kernel per non-view op, each reading its operands from and
    writing its results to HBM and paying a launch; the difference with the compiled
    numbers is what fusion saved.
    """

    total_ns: int = 0
    engine_busy_ns: dict[str, int] = field(default_factory=dict)
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    num_kernels: int = 0
    num_ops: int = 0
    spill_bytes: int = 0
    sbuf_peak_bytes: int = 0
    eager_ns: int = 0
    eager_launches: int = 0
    eager_hbm_read_bytes: int = 0
    eager_hbm_write_bytes: int = 0

    @property
    def launches_saved(self) -> int:
        """Eager launches minus compiled kernels."""
        return self.eager_launches - self.num_kernels

    @property
    def hbm_bytes_removed(self) -> int:
        """HBM traffic fusion removed (negative if spills outweigh it)."""
        eager = self.eager_hbm_read_bytes + self.eager_hbm_write_bytes
        return eager - self.hbm_read_bytes - self.hbm_write_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of the fields (properties are derived, not stored)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["engine_busy_ns"] = dict(self.engine_busy_ns)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProgramCost:
        """Inverse of ``to_dict``."""
        return cls(**d)


@dataclass
class Program:
    """The StableHLO module being compiled plus the compiler's annotations.

    ``stats`` counts what passes did (``dce_removed``, ``folded``, ...); ``passes_run``
    lists the passes in the order they ran, so a report says which were disabled.
    """

    module: Module
    profile: str = ""
    kernels: list[Kernel] = field(default_factory=list)
    cost: ProgramCost | None = None
    stats: dict[str, int] = field(default_factory=dict)
    passes_run: list[str] = field(default_factory=list)

    @property
    def function(self) -> Function:
        """The entry function, the one that becomes kernels."""
        return self.module.functions[self.module.entry]

    def with_body(self, body: list[Operation], **stats: int) -> Program:
        """A copy whose entry function has ``body`` (passes never edit a program in place)."""
        fn = self.function
        new_fn = Function(fn.name, list(fn.args), body, list(fn.result_types))
        funcs = {**self.module.functions, fn.name: new_fn}
        merged = dict(self.stats)
        for key, val in stats.items():
            merged[key] = merged.get(key, 0) + val
        return dataclasses.replace(self, module=Module(funcs, self.module.entry), stats=merged)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: the module via ``Module.to_dict``, annotations as plain data."""
        return {
            "format_version": FORMAT_VERSION,
            "module": self.module.to_dict(),
            "profile": self.profile,
            "kernels": [k.to_dict() for k in self.kernels],
            "cost": self.cost.to_dict() if self.cost is not None else None,
            "stats": dict(self.stats),
            "passes_run": list(self.passes_run),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Program:
        """Inverse of ``to_dict``; refuses formats it does not know."""
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"neuronc Program format {version!r} is not {FORMAT_VERSION}: recompile "
                "the program (cached executables from another version are not loadable)"
            )
        return cls(
            module=Module.from_dict(d["module"]),
            profile=d["profile"],
            kernels=[Kernel.from_dict(k) for k in d["kernels"]],
            cost=ProgramCost.from_dict(d["cost"]) if d["cost"] is not None else None,
            stats=dict(d["stats"]),
            passes_run=list(d["passes_run"]),
        )

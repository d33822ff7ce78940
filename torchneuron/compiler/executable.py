"""The executable: a versioned, data-only compiled program.

An executable is JSON (never pickle: loading a cache entry must not be able to run
code). It holds everything needed to run the program in a fresh process without
the FX graph: the StableHLO text as imported, the neuron compiler's program (the
StableHLO IR after its dead-code and constant-folding passes, which the simulator
executes, with kernels, schedule and cost), the input and
output signature, write-backs into inputs, the random inputs to draw, and the
versions and hardware target it was built for. ``to_bytes`` is canonical, so a
save/load round trip is byte for byte.

The program computes on real buffers only (the device has no complex dtype): the
signature's ``complex_inputs`` (user input positions) go in as ``view_as_real`` pairs
(a trailing dim of 2), and ``complex_outputs`` (program output positions) come back
through ``view_as_complex``; both are views, so a complex64 element is the 8 bytes of
its two float32 parts everywhere. Format 2 added those two fields: a format-1 loader
would hand complex inputs to the program as they are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchneuron.compiler import versions
from torchneuron.compiler.errors import ExecuteError
from torchneuron.compiler.prepare.random_ops import RandomInputSpec, draw_random_inputs
from torchneuron.compiler.stablehlo.custom_targets import TargetRaised, take_calls
from torchneuron.compiler.versions import COMPILER_VERSION, FORMAT_VERSION

__all__ = ["Executable", "FORMAT_VERSION", "COMPILER_VERSION", "ExecutableFormatError",
           "check_entry", "trust_entry", "matches_inputs"]

_MAGIC = "torchneuron-executable"


class ExecutableFormatError(ValueError):
    """The bytes are not an executable this version can load."""


@dataclass
class Executable:
    name: str
    target: str
    stablehlo: str
    program: dict[str, Any]
    signature: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    compiler_version: str = COMPILER_VERSION
    format_version: int = FORMAT_VERSION
    _ir: Any = field(default=None, repr=False, compare=False)
    _roofline_ns: int | None = field(default=None, repr=False, compare=False)
    # Where this object came from (not serialized): its cache key, and whether a store
    # served it (then no compile happened, and no compile latency is charged).
    cache_key: str | None = field(default=None, repr=False, compare=False)
    from_cache: bool = field(default=False, repr=False, compare=False)
    _loaded: Any = field(default=None, repr=False, compare=False)
    _random_specs: Any = field(default=None, repr=False, compare=False)
    _plan: Any = field(default=None, repr=False, compare=False)
    _layouts: Any = field(default=None, repr=False, compare=False)

    # -- serialization -------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "magic": _MAGIC,
            "format_version": self.format_version,
            "compiler_version": self.compiler_version,
            "name": self.name,
            "target": self.target,
            "options": self.options,
            "signature": self.signature,
            "program": self.program,
            "stablehlo": self.stablehlo,
        }

    def to_bytes(self) -> bytes:
        body = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return body.encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Executable:
        try:
            d = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ExecutableFormatError(f"not a torchneuron executable: {e}") from None
        if not isinstance(d, dict) or d.get("magic") != _MAGIC:
            raise ExecutableFormatError("not a torchneuron executable (magic missing)")
        if d.get("format_version") != versions.FORMAT_VERSION:
            raise ExecutableFormatError(
                f"executable format {d.get('format_version')} cannot be loaded by this "
                f"torchneuron (format {versions.FORMAT_VERSION}); recompile the program"
            )
        return cls(
            name=d["name"],
            target=d["target"],
            stablehlo=d["stablehlo"],
            program=d["program"],
            signature=d["signature"],
            options=d["options"],
            compiler_version=d["compiler_version"],
            format_version=d["format_version"],
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: str | Path) -> Executable:
        return cls.from_bytes(Path(path).read_bytes())

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    # -- facts -----------------------------------------------------------------

    @property
    def device_ns(self) -> int:
        """Simulated device time of one run (the neuron compiler's schedule)."""
        return int(self.program["cost"]["total_ns"])

    @property
    def num_kernels(self) -> int:
        return len(self.program["kernels"])

    @property
    def roofline_ns(self) -> int:
        """The program's roofline on its target: ``kernel_cost`` of all its kernels' work
        together (every FLOP at TensorE peak, every HBM byte at HBM bandwidth), so
        ``device_ns / roofline_ns`` says how far the schedule is from the hardware's bound."""
        if self._roofline_ns is None:
            from torchneuron.compiler.neuronc.program import work_from_dict
            from torchneuron.hardware import KernelWork, get_profile, kernel_cost

            total = KernelWork()
            for k in self.program["kernels"]:
                work = work_from_dict(k.get("work"))
                if work is not None:
                    total = total + work
            self._roofline_ns = kernel_cost(total, get_profile(self.target)).roofline_ns
        return self._roofline_ns

    def report(self) -> str:
        from torchneuron.compiler.neuronc import Program, format_program

        return format_program(Program.from_dict(self.program))

    # -- execution ---------------------------------------------------------------
    # Why prepared once: an executable runs every training step; its program is
    # resolved to a straight list of op callables the first time it runs (see
    # ``stablehlo.prepare``), and its random-input specs are read once.

    def _module(self) -> Any:
        if self._ir is None:
            from torchneuron.compiler.stablehlo import Module

            self._ir = Module.from_dict(self.program["module"])
        return self._ir

    def _interpreted_module(self) -> Any:
        """The program the interpreter runs: the compiler's, with a contiguous copy of
        each kept input for its readers that need one (``contiguous_copies``)."""
        from torchneuron.compiler.interpreter.contiguous_copies import with_contiguous_copies

        module = self._module()
        args = module.functions[module.entry].args
        copied = {args[k][0] for k, _, copy in self._layouts if copy}
        return with_contiguous_copies(module, copied, _takes_any_layout) if copied else module

    def run(
        self,
        inputs: list[torch.Tensor],
        core: Any = None,
        generator_context: Callable[[], Any] | None = None,
    ) -> list[torch.Tensor]:
        """Run on CPU buffers: draw random inputs, interpret, write back, charge the device.

        Returns the user outputs; write-back values are copied into their inputs.
        """
        from torchneuron.compiler.interpreter import load

        sig = self.signature
        if self._loaded is None:
            self._random_specs = [RandomInputSpec.from_dict(s) for s in sig["random_inputs"]]
            self._layouts = traced_layouts(self._module(), sig)
            self._loaded = load(self._interpreted_module(), self._unused_outputs())
        specs = self._random_specs
        if len(inputs) != sig["num_user_inputs"]:
            raise ExecuteError(
                f"executable {self.name} takes {sig['num_user_inputs']} inputs, got {len(inputs)}",
                op=None,
                reason="bad-arity",
            )
        args = list(inputs)
        if "complex_inputs" in sig:
            args = [torch.view_as_real(a.resolve_conj().resolve_neg()) if k in sig["complex_inputs"] else a
                    for k, a in enumerate(args)]
        if specs:  # (no random inputs: no generator swap either)
            args += draw_random_inputs(specs, generator_context, inputs)
        # (``is_contiguous`` first: a third cheaper than ``contiguous`` returning self)
        args = [a.contiguous() if isinstance(a, torch.Tensor) and not a.is_contiguous() else a
                for a in args]  # fmt: skip
        for k, stride, _ in self._layouts:  # inputs that keep the layout eager's kernels read
            if args[k].stride() != stride:
                args[k] = torch.empty_strided(args[k].shape, stride,
                                              dtype=args[k].dtype).copy_(args[k])
        try:
            outs = self._loaded.run(args)
            extra_ns, traces = take_calls()  # custom calls: time beyond their plans
        except TargetRaised as e:  # eager's own kernel raised eager's error: the user's
            take_calls()
            raise e.error from None
        except Exception as e:
            take_calls()
            raise ExecuteError(
                f"executing {self.name} on the simulator failed: {e}",
                op=getattr(e, "op", None),
                reason=type(e).__name__,
            ) from e
        if "complex_outputs" in sig:
            outs = self._complex_results(outs, sig["complex_outputs"])
        if "index_checks" in sig:  # eager's error for an out-of-range index, before writing
            from torchneuron.compiler.prepare.index_bounds import raise_out_of_range

            raise_out_of_range(sig["index_checks"], inputs, outs, self.name)
        for out_i, in_i in sig["write_backs"]:
            inputs[in_i].copy_(outs[out_i])
        if core is not None:
            start, _ = core.run_executable(self.device_ns + extra_ns, self.name,
                                           self.num_kernels, detail=self)
            if traces and core.timeline.observers:
                self._emit_custom_calls(core.timeline, start, traces)
        for out_i, api, is_matrix in sig.get("error_checks", ()):
            # eager's error for a failed factorization (prepare lifted the check out)
            torch.ops.aten._linalg_check_errors(outs[out_i], api, is_matrix=is_matrix)
        return self._user_outputs(inputs, outs)

    def _emit_custom_calls(self, timeline: Any, start: int, traces: list[list[Any]]) -> None:
        """Each planned custom call's instructions on the profiler's tracks, at its
        kernel's place in the program's schedule (calls ran in program order, as their
        kernels are; calls of eager's kernels have no plan and no trace of their own)."""
        body = self._module().functions[self._module().entry].body

        def planned(op: Any) -> bool:
            return (op.name == "stablehlo.custom_call"
                    and '"plan"' in str(op.attributes.get("backend_config", "")))

        starts = sorted((k["op_indices"][0], k["start_ns"]) for k in self.program["kernels"]
                        if len(k["op_indices"]) == 1 and planned(body[k["op_indices"][0]]))
        for (_, at), trace in zip(starts, traces, strict=False):
            for track, name, s, e, line in trace:
                timeline.emit(track, name, start + at + s, start + at + e, line)

    def _complex_results(self, outs: list[torch.Tensor], indices: list[int]) -> list[torch.Tensor]:
        """Complex outputs from their pairs, with the strides eager gives them (the
        signature holds the pairs' strides: the complex ones doubled, then 1)."""
        outs = list(outs)
        specs = self.signature["outputs"]
        for i in indices:
            outs[i] = torch.view_as_complex(_restride(outs[i], tuple(specs[i]["stride"])))
        return outs

    def _unused_outputs(self) -> list[int]:
        """The program outputs ``run`` never reads: a user output that is an input (or a
        view of one) is taken from the input, so the program need not compute it."""
        sig = self.signature
        read = {i for i, _ in sig["write_backs"]}
        read |= {c[0] for c in sig.get("error_checks", ())}
        aliased = set()
        for uo in sig["user_outputs"]:
            if uo["kind"] == "none":
                continue
            if uo["kind"] == "tensor" and uo.get("alias_input") is not None:
                aliased.add(uo["index"])
            else:
                read.add(uo["index"])
        return sorted(aliased - read)

    def _user_outputs(self, inputs: list[torch.Tensor], outs: list[torch.Tensor]) -> list[Any]:
        """The user's flat outputs: graph results, scalars, or (views of) inputs."""
        if self._plan is None:  # the signature read once: one tuple per user output
            specs = self.signature["outputs"]
            self._plan = [
                (uo["kind"], uo["index"], uo.get("alias_input"),
                 None if uo.get("view") is None else tuple(uo["view"]),
                 None if uo["kind"] != "tensor" or uo["index"] is None
                 else tuple(specs[uo["index"]]["stride"]))
                for uo in self.signature["user_outputs"]
            ]  # fmt: skip
        leaves: list[Any] = []
        for kind, i, alias_input, view, stride in self._plan:
            if kind == "none":
                leaves.append(None)
            elif kind == "scalar":
                leaves.append(outs[i].item())
            elif alias_input is not None:
                base = inputs[alias_input]
                leaves.append(base if view is None else base.as_strided(*view))
            elif outs[i].is_complex():  # (already given eager's strides)
                leaves.append(outs[i])
            else:
                leaves.append(_restride(outs[i], stride))
        return leaves


def _restride(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """Give a result the strides eager would have produced (the interpreter's are contiguous)."""
    if t.stride() == stride or t.numel() <= 1 or 0 in stride:
        return t
    out = torch.empty_strided(t.shape, stride, dtype=t.dtype)
    return out.copy_(t)


# -- content addressing ------------------------------------------------------------------
# A store hands back bytes filed under a key; a checksum there only catches accidents.
# As git checks an object against its name, ``check_entry`` recomputes the key from the
# bytes' own content (StableHLO, signature, target, options, versions: ``keys.py``) and
# rebuilds the program from the StableHLO with the neuron compiler (the program is not
# in the key: it is what neuronc makes of the StableHLO, so an edited program shows as
# a different one). The rebuild costs one neuronc run per entry and process, never the
# Torch-MLIR worker; bytes this process compiled itself or checked already are trusted.

_TRUSTED: set[tuple[str, str]] = set()
_RETURN_OPS = ("func.return", "stablehlo.return")


def trust_entry(key: str, data: bytes) -> None:
    """Mark ``data`` under ``key`` as known good in this process (it compiled them)."""
    _TRUSTED.add((key, hashlib.sha256(data).hexdigest()))


def check_entry(data: bytes, key: str, *, rebuild: bool = True) -> Executable:
    """The executable in ``data`` if its content is what ``key`` names; raises
    ``ExecutableFormatError`` saying what is wrong (never anything else).

    Checked: it parses; it was built by this compiler; its key recomputed from its
    content equals ``key``; every op is one the interpreter has; its signature agrees
    with its program; and (``rebuild``) its program is what neuronc makes of its
    StableHLO."""
    digest = hashlib.sha256(data).hexdigest()
    try:
        exe = Executable.from_bytes(data)
        if (key, digest) in _TRUSTED:
            return exe
        _check_content(exe, key, rebuild)
    except ExecutableFormatError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure on foreign data is "unusable"
        raise ExecutableFormatError(f"its content does not hold together ({type(e).__name__}: "
                                    f"{e})") from None
    _TRUSTED.add((key, digest))
    return exe


def _check_content(exe: Executable, key: str, rebuild: bool) -> None:
    from torchneuron.compiler.keys import executable_key

    for name, typ in (("stablehlo", str), ("target", str), ("program", dict),
                      ("signature", dict), ("options", dict)):
        if not isinstance(getattr(exe, name), typ):
            raise ExecutableFormatError(f"its {name} is not a {typ.__name__}")
    if exe.compiler_version != versions.COMPILER_VERSION:
        raise ExecutableFormatError(f"compiled by torchneuron {exe.compiler_version}, this is "
                                    f"{versions.COMPILER_VERSION}")
    got, _ = executable_key(exe.stablehlo, exe.target, exe.options, exe.signature)
    if got != key:
        raise ExecutableFormatError(f"its content hashes to key {got[:12]}, not to the key "
                                    f"{key[:12]} it is filed under (edited?)")
    module = exe._module()
    _check_ops(module)
    _check_signature(exe.signature, module)
    if rebuild:
        from torchneuron.compiler.neuronc import compile_module
        from torchneuron.compiler.stablehlo import parse_module
        from torchneuron.hardware import get_profile

        fresh = compile_module(parse_module(exe.stablehlo), get_profile(exe.target), exe.options)
        if _canonical(fresh.to_dict()) != _canonical(exe.program):
            raise ExecutableFormatError("its program is not what the neuron compiler makes of "
                                        "its StableHLO (edited?)")


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _check_ops(module: Any) -> None:
    from torchneuron.compiler.interpreter._registry import OPS
    from torchneuron.compiler.stablehlo.custom_targets import lookup_target

    todo = [op for f in module.functions.values() for op in f.body]
    while todo:
        op = todo.pop()
        if op.name not in OPS and op.name not in _RETURN_OPS:
            raise ExecutableFormatError(f"its program uses {op.name}, an op the interpreter "
                                        "does not have")
        if op.name == "stablehlo.custom_call" and lookup_target(
                str(op.attributes.get("call_target_name"))) is None:
            raise ExecutableFormatError(
                f"its program calls custom-call target {op.attributes.get('call_target_name')!r}"
                ", which nothing in this process registered (a kernel by name, never code)")
        todo.extend(o for region in op.regions for o in region)


def _check_signature(sig: dict[str, Any], module: Any) -> None:
    """Indices the signature holds point inside the program's inputs and outputs."""
    entry = module.functions[module.entry]
    n_in, n_out = sig["num_user_inputs"], len(sig["outputs"])
    problems = []
    if not isinstance(n_in, int) or not 0 <= n_in <= len(entry.args):
        problems.append(f"{n_in} user inputs for a program of {len(entry.args)}")
    if n_out != len(entry.result_types):
        problems.append(f"{n_out} outputs for a program of {len(entry.result_types)}")
    for out_i, in_i in sig["write_backs"]:
        if not (0 <= out_i < n_out and 0 <= in_i < n_in):
            problems.append(f"write-back {out_i}->{in_i} out of range")
    for uo in sig["user_outputs"]:
        i, alias = uo.get("index"), uo.get("alias_input")
        if uo["kind"] != "none" and alias is None and not (isinstance(i, int) and 0 <= i < n_out):
            problems.append(f"user output index {i} out of range")
        if alias is not None and not (isinstance(alias, int) and 0 <= alias < n_in):
            problems.append(f"user output aliases input {alias}, out of range")
    if problems:
        raise ExecutableFormatError("its signature does not fit its program: "
                                    + "; ".join(problems[:3]))


def matches_inputs(exe: Executable, example_inputs: Any) -> bool:
    """Whether ``exe`` was built for inputs like ``example_inputs`` (count, and each
    tensor's shape and dtype): a link that names another graph's executable is refused."""
    import torch as _torch

    sig = exe.signature
    if len(example_inputs) != sig.get("num_user_inputs"):
        return False
    for x, spec in zip(example_inputs, sig.get("inputs", []), strict=False):
        if isinstance(x, _torch.Tensor) and all(type(d) is int for d in x.shape) and (
                list(x.shape) != spec.get("shape")
                                             or str(x.dtype) != spec.get("dtype")):
            return False
    return True


_EAGER_KERNEL_CALL = "stablehlo.custom_call (eager's kernel)"  # (``_reader``)
_LAYOUT_READERS = frozenset({"stablehlo.transpose", "stablehlo.dot_general", "stablehlo.convolution",
                             "stablehlo.reshape", "func.return", _EAGER_KERNEL_CALL})
# Elementwise ops: the interpreter calls torch's own elementwise kernel on the operand as
# it is, so a strided input takes the loop eager's kernel took on it.
_ELEMENTWISE_READERS = frozenset(
    {f"stablehlo.{name}" for name in (
        "negate", "abs", "sign", "exponential", "exponential_minus_one", "log",
        "log_plus_one", "logistic", "tanh", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan",
        "floor", "ceil", "round_nearest_even", "is_finite", "add", "subtract", "multiply",
        "divide", "power", "maximum", "minimum", "atan2", "compare", "select", "convert",
        "clamp")})


def _reader(op: Any) -> str:
    """The op's name, or ``_EAGER_KERNEL_CALL`` for a call of eager's own kernel (its
    ``costed`` form, ``decomp/eager_kernels``): that call hands the kernel each operand in
    the layout eager's had (``operand_layout.in_layout``), whatever layout it is given,
    so it takes any."""
    from torchneuron.compiler.neuronc._ops import eager_cost

    return _EAGER_KERNEL_CALL if eager_cost(op) is not None else str(op.name)


def _takes_any_layout(op: Any) -> bool:
    """Whether ``op`` reads a kept input with gaps in its own layout (the others read a
    contiguous copy: ``contiguous_copies``)."""
    return _reader(op) in _LAYOUT_READERS | _ELEMENTWISE_READERS


def traced_layouts(module: Any, sig: dict[str, Any]
                   ) -> list[tuple[int, tuple[int, ...], bool]]:
    """(input index, strides, whether other readers read a contiguous copy) for each user
    input whose traced layout the interpreter is handed instead of a contiguous copy: a
    dense, non-contiguous one read only by ops whose torch calls take any layout
    (``_LAYOUT_READERS``, calls of eager's kernels among them), or one with gaps between
    its rows (a slice, a chunk of a wider tensor) read by those or elementwise ops, the
    input's other readers then reading a contiguous copy of it.

    Why: eager's kernels pick their algorithm by layout, and their bits differ. A linear
    layer's backward multiplies by the saved ``w.t()`` transposed back: eager reads the
    contiguous ``w``; a contiguous copy of ``w.t()`` transposed back is a transposed view,
    BLAS's other kernel, and 40% of the input gradient's elements differed (batch 2,
    256 -> 4). A channels_last convolution made contiguous took oneDNN's other path
    (170 of 288 outputs). ATen's elementwise loops run rows shorter than two vectors in
    their scalar tail, whose ``exp`` is libm's and not SLEEF's: ``sigmoid`` of a (64, 8)
    slice of a (64, 24) tensor differed in 20 of 512 elements from a contiguous copy, and
    adaptive eager's replay of a GRU with 8 hidden units (its gates are column chunks of one
    projection) drifted from eager. A call of eager's kernel reading the same input made
    it contiguous for the elementwise ops too, though the call re-lays its operand itself:
    ``logit(sigmoid(x))`` of a stepped input beside ``logsigmoid(x)`` (or ``bce``) was off
    in 98 of 2310 float32 elements; beside ``x[:, 3]`` or ``mv(x, x[0])`` (a slice reads
    it) likewise, so those readers now read a contiguous copy and the elementwise ones the
    input. Other ops keep contiguous inputs, which the interpreter's index arithmetic
    assumes."""
    from torch._prims_common import make_contiguous_strides_for

    func = module.functions[module.entry]
    readers: dict[str, set[str]] = {}

    def scan(ops: list[Any]) -> None:
        for op in ops:
            for o in op.operands:
                readers.setdefault(o, set()).add(_reader(op))
            for region in op.regions:
                scan(region)

    scan(func.body)
    kept = []
    complex_inputs = set(sig.get("complex_inputs", ()))
    for k, spec in enumerate(sig["inputs"][: sig["num_user_inputs"]]):
        shape, stride = spec["shape"], tuple(spec["stride"])
        if k in complex_inputs or k >= len(func.args) \
                or stride == tuple(make_contiguous_strides_for(shape)):
            continue
        used = readers.get(func.args[k][0], set())
        if _dense(shape, stride):
            if used and used <= _LAYOUT_READERS:
                kept.append((k, stride, False))
        elif _gapped(shape, stride) and used & (_LAYOUT_READERS | _ELEMENTWISE_READERS):
            kept.append((k, stride, not used <= _LAYOUT_READERS | _ELEMENTWISE_READERS))
    return kept


def _gapped(shape: list[int], stride: tuple[int, ...]) -> bool:
    """Whether the strides reach distinct elements with gaps between them: each dim's
    stride (smallest first) passes every element of the dims below it. No broadcast dims,
    every size above 1."""
    if len(shape) != len(stride) or any(size < 2 for size in shape):
        return False
    reach = 0  # the last element the dims below reach
    for d in sorted(range(len(shape)), key=lambda d: stride[d]):
        if stride[d] <= reach:
            return False
        reach += (shape[d] - 1) * stride[d]
    return True


def _dense(shape: list[int], stride: tuple[int, ...]) -> bool:
    """Whether the strides are a permutation of a contiguous layout's (no gaps, no
    broadcast dims, every size above 1)."""
    if len(shape) != len(stride) or any(size < 2 for size in shape):
        return False
    order = sorted(range(len(shape)), key=lambda d: stride[d])
    step = 1
    for d in order:
        if stride[d] != step:
            return False
        step *= shape[d]
    return True

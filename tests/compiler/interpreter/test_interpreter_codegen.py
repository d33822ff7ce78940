"""A block's generated straight-line function (``_codegen``) does exactly what the
interpreter's loop does: the same bits out, the same errors naming the same op, values
freed at the same points, nested regions still reading outer values by name.

Why: from a block's second run on, every executable runs through generated code; the loop
(``Loaded.codegen = False``) is the reference each test compares against.
"""

from __future__ import annotations

import importlib
import re
import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import torchneuron.adaptive_eager as ae
from tests import loops
from tests.compiler.interpreter.test_interpreter_parity import CASES
from torchneuron.compiler.interpreter import StableHLOExecutionError, load
from torchneuron.compiler.interpreter._codegen import generate
from torchneuron.compiler.stablehlo import parse_module

_interpret = importlib.import_module("torchneuron.compiler.interpreter.interpret")


def _same_bits(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}
        return torch.equal(a.contiguous().view(width[a.element_size()]),
                           b.contiguous().view(width[b.element_size()]))  # fmt: skip
    return torch.equal(a, b)


def _entry(prepared: Any) -> Any:
    return prepared.block(prepared.entry.body)


def _runs(text_or_module: Any, inputs: list[list[torch.Tensor]], codegen: bool,
          monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[Any, list[list[Any]]]:  # fmt: skip
    """A fresh prepared program run on each input list in turn, codegen on or off."""
    module = parse_module(text_or_module) if isinstance(text_or_module, str) else text_or_module
    monkeypatch.setattr(_interpret.Loaded, "codegen", codegen)
    monkeypatch.setattr(_interpret.Loaded, "codegen_after", 0)  # generated on run 2
    prepared = load(module, **kw)
    return prepared, [prepared.run(list(xs)) for xs in inputs]


@pytest.mark.parametrize("name,fn,make_inputs", CASES, ids=[c[0] for c in CASES])
def test_parity_programs_give_the_loops_bits(name, fn, make_inputs, lower, monkeypatch) -> None:
    """Every parity program (forward and training graphs, while loops, sorts, scatters):
    runs 2 and 3 run generated code and give the loop's bits."""
    inputs = [make_inputs() for _ in range(3)]
    module = parse_module(lower(fn, inputs[0]))
    gen, got = _runs(module, inputs, True, monkeypatch)
    _, want = _runs(module, inputs, False, monkeypatch)
    assert _entry(gen).gen is not None, "the entry block did not get a generated function"
    for run, (g, w) in enumerate(zip(got, want, strict=True)):
        assert len(g) == len(w)
        for i, (a, b) in enumerate(zip(g, w, strict=True)):
            assert _same_bits(a, b), f"{name} run {run} output {i}"


_WHILE_READS_OUTER = """func.func @main(%arg0: tensor<i64>, %arg1: tensor<3xf32>) -> tensor<3xf32> {
  %y = stablehlo.multiply %arg1, %arg1 : tensor<3xf32>
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c1 = stablehlo.constant dense<1> : tensor<i64>
  %z = stablehlo.constant dense<0.0> : tensor<3xf32>
  %0:2 = "stablehlo.while"(%c0, %z) ({
  ^bb0(%i: tensor<i64>, %s: tensor<3xf32>):
    %p = "stablehlo.compare"(%i, %arg0) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "stablehlo.return"(%p) : (tensor<i1>) -> ()
  }, {
  ^bb0(%i: tensor<i64>, %s: tensor<3xf32>):
    %s2 = "stablehlo.add"(%s, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %i2 = "stablehlo.add"(%i, %c1) : (tensor<i64>, tensor<i64>) -> tensor<i64>
    "stablehlo.return"(%i2, %s2) : (tensor<i64>, tensor<3xf32>) -> ()
  }) : (tensor<i64>, tensor<3xf32>) -> (tensor<i64>, tensor<3xf32>)
  %out = stablehlo.add %0#1, %arg1 : tensor<3xf32>
  return %out : tensor<3xf32>
}"""


def test_region_reads_outer_values_by_name(monkeypatch) -> None:
    """A while body reads ``%y`` (computed in the enclosing block, a local of its generated
    function) and ``%c1`` (a kept constant): both must be in the env the region sees."""
    g = torch.Generator().manual_seed(0)
    inputs = [[torch.tensor(n), torch.randn(3, generator=g)] for n in (3, 5, 4, 2)]
    prepared, got = _runs(_WHILE_READS_OUTER, inputs, True, monkeypatch)
    _, loop = _runs(_WHILE_READS_OUTER, inputs, False, monkeypatch)
    entry = _entry(prepared)
    made = {r for s in entry.hot for r in s.results}
    assert entry.gen is not None and entry.pinned & made and entry.pinned & set(entry.consts)
    body = next(b for ops, b in prepared._blocks.values() if ops is not prepared.entry.body
                and b.gen is not None)  # fmt: skip
    assert body.gen is not None  # the loop body itself ran as generated code
    for (n, x), (out,), (ref,) in zip(inputs, got, loop, strict=True):
        s = torch.zeros(3)
        for _ in range(int(n)):
            s = s + x * x
        assert _same_bits(out, s + x) and _same_bits(out, ref)


_MATMULS = """func.func @main(%arg0: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %a = stablehlo.add %arg0, %arg0 : tensor<64x64xf32>
  %b = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %c = stablehlo.dot_general %b, %arg0, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %d = stablehlo.dot_general %c, %c, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  return %d : tensor<64x64xf32>
}"""


@pytest.mark.parametrize("codegen", [True, False], ids=["generated", "loop"])
def test_dead_values_are_freed_after_their_last_reader(codegen, monkeypatch) -> None:
    """A value dropped after its last reader must be gone (its memory back to the
    allocator, by reference count alone) when the next steps run, in generated code as
    in the loop."""
    monkeypatch.setattr(_interpret.Loaded, "codegen", codegen)
    monkeypatch.setattr(_interpret.Loaded, "codegen_after", 0)  # generated on run 2
    prepared = load(parse_module(_MATMULS))
    prepared.run([torch.randn(64, 64)])  # the first run: the loop, constants kept
    hot = _entry(prepared).hot
    # a step whose result a later step drops, and a step after that one
    made_at, dropped_at = next(
        (i, j) for i, s in enumerate(hot) for j in range(i + 1, len(hot) - 1)
        if set(s.results) & set(hot[j].drop)
    )  # fmt: skip
    made: list[weakref.ref] = []
    seen: list[bool] = []
    maker, later = hot[made_at].fn, hot[dropped_at + 1].fn

    def recording(op, args, run):  # noqa: ANN001, ANN202
        out = maker(op, args, run)
        made.append(weakref.ref(out[0]))
        return out

    def checking(op, args, run):  # noqa: ANN001, ANN202
        seen.append(made[-1]() is None)
        return later(op, args, run)

    hot[made_at].fn, hot[dropped_at + 1].fn = recording, checking
    for _ in range(2):
        prepared.run([torch.randn(64, 64)])
    assert (_entry(prepared).gen is not None) == codegen
    assert seen == [True, True]


def _program(shape: str) -> str:
    return f"""func.func @main(%arg0: tensor<{shape}xf32>, %arg1: tensor<{shape}xf32>) -> tensor<{shape}xf32> {{
  %s = stablehlo.add %arg0, %arg1 : tensor<{shape}xf32>
  %t = stablehlo.multiply %s, %s : tensor<{shape}xf32>
  return %t : tensor<{shape}xf32>
}}"""


def _outcome(shape: str, codegen: bool, monkeypatch: pytest.MonkeyPatch, result: Any,
             bad: list[torch.Tensor] | None) -> Any:  # fmt: skip
    """What a later run of the program gives (outputs) or raises (the exception): with
    ``bad`` inputs (the third run), or with the multiply's step made to return ``result``
    after run 1 (the second run, the first of generated code)."""
    monkeypatch.setattr(_interpret.Loaded, "codegen", codegen)
    monkeypatch.setattr(_interpret.Loaded, "codegen_after", 0)  # generated on run 2
    prepared = load(parse_module(_program(shape)))
    good = [torch.ones(2), torch.ones(2)]
    prepared.run(good)
    if result is not None:
        step = next(s for s in _entry(prepared).hot if s.op.name == "stablehlo.multiply")
        step.fn = lambda op, args, run: result
    else:
        prepared.run(good)
    try:
        return prepared.run(bad or good)
    except Exception as e:  # noqa: BLE001
        return e
    finally:
        assert (_entry(prepared).gen is not None) == codegen


@pytest.mark.parametrize("shape", ["2", "?"], ids=["static", "dynamic"])
@pytest.mark.parametrize(
    "kind,result,bad",
    [
        ("op raises", None, [torch.ones(2), torch.ones(3)]),
        ("wrong dtype", [torch.ones(2, dtype=torch.float64)], None),
        ("wrong shape", [torch.ones(3)], None),
        ("two results", [torch.ones(2), torch.ones(2)], None),
        ("not a list", 7, None),
    ],
)
def test_errors_are_the_loops(kind, result, bad, shape, monkeypatch) -> None:
    """A failing op is wrapped in StableHLOExecutionError naming it; a wrong result fails
    the loop's check with the loop's message (a dynamic shape is not checked, as in the
    loop); what the loop does not wrap (an op returning no list) is not wrapped either."""
    if bad is not None and shape == "2":
        pytest.skip("a static program refuses mismatched inputs before any op runs")
    got = _outcome(shape, True, monkeypatch, result, bad)
    want = _outcome(shape, False, monkeypatch, result, bad)
    if kind == "wrong shape" and shape == "?":
        assert _same_bits(got[0], want[0]) and got[0].shape == (3,)
        return
    assert type(got) is type(want) and str(got) == str(want)
    if kind == "not a list":
        assert isinstance(got, TypeError)
        return
    assert isinstance(got, StableHLOExecutionError)
    if kind == "op raises":
        assert "%0 = stablehlo.add(%arg0, %arg1)" in str(got) and got.op == "stablehlo.add"
    else:  # (the parser numbers the values)
        assert "%1 = stablehlo.multiply(%0, %0)" in str(got)


def test_unused_outputs_and_source_hold_no_program_text(monkeypatch) -> None:
    """Slots for unused outputs come back as None; the compiled source never contains a
    name or op of the program (they are bound as globals), the listing shows them."""
    # %private is returned too, so it is read twice and no pointwise tree fuses the two
    # ops: the listing shows the program's own op names
    text = """func.func @main(%secret_in: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %hidden = stablehlo.transpose %secret_in, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %private = stablehlo.add %secret_in, %secret_in : tensor<2x3xf32>
  %more = stablehlo.multiply %private, %secret_in : tensor<2x3xf32>
  return %hidden, %private, %more : tensor<3x2xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}"""
    x = torch.randn(2, 3)
    prepared, got = _runs(text, [[x]] * 3, True, monkeypatch, unused_outputs=[0])
    for t, p, m in got:
        assert t is None and torch.equal(p, x + x) and torch.equal(m, (x + x) * x)
    gen = _entry(prepared).gen
    assert gen is not None
    names = {n for s in _entry(prepared).steps for n in (*s.operands, *s.results)}
    for word in ("secret", "arg0", "stablehlo", "transpose", "%", "'", '"'):
        assert word not in gen.source  # no name, op or string literal of the program
    listing = gen.listing()
    assert "stablehlo.multiply" in listing and all(f"%{n}" in listing for n in names - {"arg0"})
    assert "return [None, " in gen.source


def test_a_block_read_before_made_keeps_the_loop() -> None:
    """A step reading a value a later step makes is not expressible: no function."""

    def step(op: str, operands: tuple[str, ...], results: tuple[str, ...]) -> Any:
        return SimpleNamespace(op=SimpleNamespace(name=op, results=list(results)),
                               fn=None, operands=operands, results=results, dtypes=(None,),
                               shapes=(None,), checks=(), single=False, drop=())  # fmt: skip

    def block(steps: list[Any]) -> Any:
        return SimpleNamespace(steps=steps, hot=steps, consts={}, pinned=set(),
                               returns=("x",), slots=None, width=0)  # fmt: skip

    steps = [step("a", ("y",), ("x",)), step("b", ("p",), ("y",))]
    assert generate(block(steps), None, None) is None
    assert generate(block(list(reversed(steps))), None, None) is not None


def test_blocks_are_generated_after_codegen_after_runs(monkeypatch) -> None:
    """Compiling costs as much as many loop runs save: a block runs on the loop for its
    first run and ``codegen_after`` more, then as generated code."""
    monkeypatch.setattr(_interpret.Loaded, "codegen_after", 3)
    prepared = load(parse_module(_program("2")))
    made = []
    for _ in range(6):
        prepared.run([torch.ones(2), torch.ones(2)])
        made.append(_entry(prepared).gen is not None)
    assert made == [False, False, False, False, True, True]


def _train(name: str, mode: str, codegen: bool,
           monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:  # fmt: skip
    """Losses of 8 training steps and the final parameters."""
    monkeypatch.setattr(_interpret.Loaded, "codegen", codegen)
    torch.manual_seed(0)
    loop = loops.make_loop(name, "eager" if mode == "adaptive" else mode)
    if mode == "adaptive":
        ae.reset()
        ae.enable()
    try:
        out = [loop.step().cpu() for _ in range(8)]
    finally:
        if mode == "adaptive":
            ae.disable()
    return out + [p.detach().cpu().clone() for p in loop.model.parameters()]


@pytest.mark.parametrize(
    "name,mode",
    [("res_mlp", "compiled"), ("transformer_lm", "compiled"), ("cnn", "compiled"),
     ("transformer_lm", "adaptive"), ("cnn", "adaptive")],  # fmt: skip
)
def test_zoo_training_loops_give_the_loops_bits(name, mode, monkeypatch) -> None:
    """The zoo's training steps (tests/loops.py) under torch.compile and adaptive eager:
    losses and final weights bit for bit those of the loop, with generated code used."""
    made: list[Any] = []
    generate_block = _interpret._Block.generate

    def recording(block: Any, after: int) -> Any:
        gen = generate_block(block, after)
        if gen is not None:
            made.append(gen)
        return gen

    monkeypatch.setattr(_interpret._Block, "generate", recording)
    want = _train(name, mode, False, monkeypatch)
    assert not made
    got = _train(name, mode, True, monkeypatch)
    assert made, "no block ran as generated code"
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert _same_bits(a, b), f"{name} {mode}: value {i}"


@pytest.mark.parametrize(
    "inputs,message",
    [
        ([torch.ones(2), torch.ones(2, dtype=torch.float64)], "input 1 (%arg1) has dtype"),
        ([torch.ones(3), torch.ones(2)], "input 0 (%arg0) has shape [3]"),
        ([torch.ones(2, 1), torch.ones(2)], "input 0 (%arg0) has shape [2, 1]"),
        ([torch.ones(2)], "takes 2 inputs, got 1"),
        ([torch.ones(2)] * 3, "takes 2 inputs, got 3"),
    ],
)
def test_inputs_of_another_type_are_refused(inputs, message) -> None:
    """A static program compares its inputs' dtypes and shapes as two lists at once; any
    difference still gets the input-by-input check, naming the input."""
    prepared = load(parse_module(_program("2")))
    assert prepared.run([torch.ones(2), torch.ones(2)])[0].tolist() == [4.0, 4.0]
    with pytest.raises(StableHLOExecutionError, match=re.escape(message)):
        prepared.run(inputs)

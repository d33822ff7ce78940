"""The executable: data-only, byte-for-byte save/load, same numbers in a fresh process.

Also the whole pipeline's loud failures and the simulated-time claims of the
compiler issue, each checked against the cost model's own numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torchneuron  # noqa: F401
import torchneuron.compiler as tc
from torchneuron.compiler import CompileError, Executable, ExecutableFormatError, compile_graph
from torchneuron.hardware import current_profile


def _mlp_step(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w1).relu() @ w2


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(8, 16, generator=g), torch.randn(16, 32, generator=g),
            torch.randn(32, 4, generator=g)]


@pytest.fixture(scope="module")
def exe() -> Executable:
    return compile_graph(_mlp_step, _inputs(), name="mlp_step")


def test_executable_matches_eager(exe: Executable) -> None:
    inputs = _inputs()
    (out,) = exe.run(inputs)
    torch.testing.assert_close(out, _mlp_step(*inputs))


def test_save_load_is_byte_for_byte(exe: Executable, tmp_path: Path) -> None:
    path = tmp_path / "mlp.json"
    exe.save(path)
    again = Executable.load(path)
    assert again.to_bytes() == exe.to_bytes() == path.read_bytes()
    json.loads(path.read_text())  # plain JSON data, nothing executable


def test_fresh_process_gives_identical_results(exe: Executable, tmp_path: Path) -> None:
    path = tmp_path / "mlp.json"
    exe.save(path)
    inputs = _inputs()
    torch.save(inputs, tmp_path / "inputs.pt")
    script = textwrap.dedent(f"""
        import torch
        from torchneuron.compiler import Executable
        exe = Executable.load({str(path)!r})
        inputs = torch.load({str(tmp_path / "inputs.pt")!r})
        torch.save(exe.run(inputs), {str(tmp_path / "out.pt")!r})
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    (theirs,) = torch.load(tmp_path / "out.pt")
    (ours,) = exe.run(_inputs())
    assert torch.equal(theirs, ours)


def test_corrupt_or_foreign_bytes_are_refused() -> None:
    with pytest.raises(ExecutableFormatError):
        Executable.from_bytes(b"\x80\x04pickle")
    with pytest.raises(ExecutableFormatError):
        Executable.from_bytes(b'{"magic": "something-else"}')


def test_failed_compile_is_loud_and_counted() -> None:
    tc.reset_stats()

    def data_dependent(x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x)  # output shape depends on values

    with pytest.raises(CompileError) as info:
        compile_graph(data_dependent, [torch.randn(5)], name="nz")
    assert info.value.stage == "prepare"
    assert tc.stats()["failures"] == 1
    assert info.value.reason in tc.explain()


def test_big_bf16_matmul_near_tensor_engine_roofline() -> None:
    a = torch.empty(4096, 4096, dtype=torch.bfloat16)
    exe = compile_graph(torch.mm, [a, a], name="mm4096")
    roofline_ns = 2 * 4096**3 / current_profile().bf16_flops * 1e9
    assert exe.device_ns <= 1.5 * roofline_ns, (exe.device_ns, roofline_ns)


def test_dump_dir_has_every_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    compile_graph(_mlp_step, _inputs(), name="dumped")
    (folder,) = tmp_path.iterdir()
    names = {p.name for p in folder.iterdir()}
    assert {"fx_graph.txt", "stablehlo.mlir", "program.txt", "cost.json",
            "executable.json"} <= names
    assert "stablehlo.dot_general" in (folder / "stablehlo.mlir").read_text()


def test_compiled_outputs_own_their_storage_under_inference_mode() -> None:
    """Under ``torch.inference_mode()`` a compiled function's outputs are their own
    tensors, as eager's are: writing the input or one output changes no other output
    (views of inference tensors have no ``_base``, so aliasing is found by storage)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.clone().reshape(6)

    def g(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return y, y.clone().reshape(6)

    torch._dynamo.reset()
    x = torch.randn(2, 3)
    xn = x.to("neuron")
    with torch.inference_mode():
        out = torch.compile(f, backend="neuron")(xn)
        xn.fill_(5.0)
        assert torch.equal(out.cpu(), f(x))
        xn.copy_(x.to("neuron"))
        a, b = torch.compile(g, backend="neuron")(xn)
        a.fill_(0.0)
        assert torch.equal(b.cpu(), g(x)[1])
    torch._dynamo.reset()

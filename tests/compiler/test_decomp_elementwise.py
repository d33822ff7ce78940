"""fmod by a scalar, nextafter, stable sort: compiled = eager; polar refused.

Each was refused by the lowering before (dangling scalar, shape check, no lowering);
polar compiled then, off in the last bits (eager's sin and cos), and is refused again."""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler import CompileError, compile_graph


def test_fmod_by_a_python_scalar() -> None:
    x = torch.randn(7) * 5
    exe = compile_graph(lambda t: (torch.fmod(t, 1.5), torch.fmod(t, -2)), [x])
    for got, want in zip(exe.run([x]), (torch.fmod(x, 1.5), torch.fmod(x, -2)), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_polar_is_refused() -> None:
    r, theta = torch.rand(2, 5), torch.randn(())
    with pytest.raises(CompileError) as e:
        compile_graph(torch.polar, [r, theta])
    assert e.value.reason == "complex-op" and e.value.stage == "prepare", e.value


def test_nextafter_is_bitwise_eagers() -> None:
    vals = torch.tensor([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-38, 2.5, -2.5,
                         torch.finfo(torch.float32).max, -torch.finfo(torch.float32).max,
                         float("inf"), float("-inf"), float("nan")])
    a, b = (t.reshape(-1) for t in torch.meshgrid(vals, vals, indexing="ij"))
    got = compile_graph(torch.nextafter, [a, b]).run([a, b])[0]
    want = torch.nextafter(a, b)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    keep = ~torch.isnan(want)
    assert torch.equal(got[keep].view(torch.int32), want[keep].view(torch.int32))


def test_stable_sort_keeps_the_order_of_equal_keys() -> None:
    x = torch.randint(0, 3, (4, 9)).float()
    for descending in (False, True):
        def fn(t: torch.Tensor, d: bool = descending) -> tuple[torch.Tensor, torch.Tensor]:
            return tuple(torch.sort(t, dim=1, stable=True, descending=d))  # type: ignore[return-value]

        got = compile_graph(fn, [x]).run([x])
        want = fn(x)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])

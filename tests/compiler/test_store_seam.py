"""The cache seam of ``compile_graph``: a store handed in through ``ExecutableStore``.

A plain dict-backed store stands in for ``torchneuron.cache`` (the compiler never
imports it): a resolved graph key skips prepare, lowering and neuronc; the StableHLO
key is the same whatever the graph is called; bytes that do not load are a counted
miss, rebuilt and saved over.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchneuron.compiler import Executable, compile_graph, pipeline, reset_stats, stats
from torchneuron.compiler.keys import executable_key, fx_graph_key, index_key
from torchneuron.compiler.store import ExecutableStore


class DictStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.meta: dict[str, dict[str, Any]] = {}
        self.links: dict[str, str] = {}

    def load(self, key: str) -> bytes | None:
        return self.data.get(key)

    def save(self, key: str, data: bytes, meta: dict[str, Any]) -> None:
        self.data[key], self.meta[key] = data, meta

    def resolve(self, graph_key: str) -> str | None:
        return self.links.get(graph_key)

    def link(self, graph_key: str, key: str) -> None:
        self.links[graph_key] = key


def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) * 2


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 8, generator=g), torch.randn(8, 3, generator=g)]


@pytest.fixture(autouse=True)
def _fresh_stats() -> None:
    reset_stats()


def test_dict_store_satisfies_protocol() -> None:
    assert isinstance(DictStore(), ExecutableStore)


def test_resolved_graph_key_skips_every_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    store, xs = DictStore(), _inputs()
    first = compile_graph(f, xs, name="a", store=store, graph_key="g1", in_process=True)
    assert not first.from_cache and len(store.data) == 1 and len(store.links) == 1
    assert stats()["compilations"] == 1 and stats()["cache"]["misses"] == 1

    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("a resolved graph key must not prepare/lower/compile")

    monkeypatch.setattr(pipeline, "prepare", boom)
    monkeypatch.setattr("torchneuron.compiler.lower.worker.run_in_worker", boom)
    second = compile_graph(f, xs, name="b", store=store, graph_key="g1", in_process=True)
    assert second.from_cache and second.name == "b"
    assert stats()["compilations"] == 1 and stats()["cache"]["hits"] == 1
    torch.testing.assert_close(second.run(_inputs()), first.run(_inputs()), rtol=0, atol=0)
    torch.testing.assert_close(second.run(_inputs())[0], f(*_inputs()))


def test_key_is_name_independent_and_skips_neuronc(monkeypatch: pytest.MonkeyPatch) -> None:
    store, xs = DictStore(), _inputs()
    a = compile_graph(f, xs, name="forward_0", store=store, in_process=True)
    (key,) = store.data
    assert b"forward_0" not in store.data[key]
    assert key == executable_key(a.stablehlo, a.target, {}, a.signature)[0] == a.cache_key
    calls: list[str] = []
    real = pipeline.run_neuronc

    def spy(*args: Any) -> Any:
        calls.append("neuronc")
        return real(*args)

    monkeypatch.setattr(pipeline, "run_neuronc", spy)
    b = compile_graph(f, xs, name="forward_7", store=store, graph_key="other", in_process=True)
    assert b.from_cache and calls == [] and b.name == "forward_7"
    assert store.links == {index_key("other", a.target, {}): key}


def test_same_program_with_other_write_backs_is_another_executable() -> None:
    """``x.add_(1)`` (returning nothing) and ``x + 1`` lower to the same StableHLO; only
    the first writes back. Keyed on StableHLO alone, the second got the first's executable:
    it returned None and mutated its input."""
    store = DictStore()

    def inplace(x: torch.Tensor) -> None:
        x.add_(1)

    def fresh(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    a = compile_graph(inplace, [torch.zeros(3)], store=store, in_process=True)
    b = compile_graph(fresh, [torch.zeros(3)], store=store, in_process=True)
    assert a.stablehlo == b.stablehlo
    assert not b.from_cache and a.cache_key != b.cache_key
    x = torch.zeros(3)
    torch.testing.assert_close(b.run([x])[0], torch.ones(3))
    torch.testing.assert_close(x, torch.zeros(3))  # not written back


def test_options_and_target_change_the_key() -> None:
    k = executable_key("module {}", "trn2", {})[0]
    assert k != executable_key("module {}", "trn3", {})[0]
    assert k != executable_key("module {}", "trn2", {"fuse": False})[0]
    assert k == executable_key("module {}", "trn2", {})[0]


@pytest.mark.parametrize("bad", [b"", b"not json", b'{"magic": "torchneuron-executable"}'])
def test_bytes_that_do_not_load_are_a_counted_miss_and_rebuilt(bad: bytes) -> None:
    store, xs = DictStore(), _inputs()
    compile_graph(f, xs, store=store, graph_key="g", in_process=True)
    (key,) = store.data
    good = store.data[key]
    store.data[key] = bad
    with pytest.warns(UserWarning, match="does not load"):
        exe = compile_graph(f, xs, store=store, graph_key="g", in_process=True)
    assert not exe.from_cache
    assert stats()["cache"] == {"hits": 0, "misses": 2, "corrupt": 1}
    assert store.data[key] == good
    assert Executable.from_bytes(store.data[key]).stablehlo == exe.stablehlo


def test_fx_graph_key_sees_shapes_and_constants() -> None:
    root = torch.nn.Module()
    root.register_buffer("weight", torch.randn(2, 3))
    g = torch.fx.Graph()
    inp, w = g.placeholder("x"), g.get_attr("weight")
    g.output(g.call_function(torch.ops.aten.mm.default,
                             (inp, g.call_function(torch.ops.aten.t.default, (w,)))))
    gm = torch.fx.GraphModule(root, g)
    x = torch.randn(4, 3)
    k = fx_graph_key(gm, [x])
    assert k is not None and k == fx_graph_key(gm, [torch.randn(4, 3)])
    assert k != fx_graph_key(gm, [torch.randn(5, 3)])
    with torch.no_grad():
        gm.weight.add_(1)
    assert k != fx_graph_key(gm, [x])


def test_fx_graph_key_sees_inline_tensor_values() -> None:
    """repr() of a large tensor elides its middle; the key must not."""
    def graph_with(const: torch.Tensor) -> torch.fx.GraphModule:
        g = torch.fx.Graph()
        x = g.placeholder("x")
        g.output(g.call_function(torch.ops.aten.add.Tensor, (x, const)))
        return torch.fx.GraphModule(torch.nn.Module(), g)

    a, b = torch.zeros(5000), torch.zeros(5000)
    b[2500] = 1
    assert repr(a) == repr(b)
    x = torch.zeros(5000)
    assert fx_graph_key(graph_with(a), [x]) != fx_graph_key(graph_with(b), [x])


def test_fx_graph_key_refuses_what_it_cannot_see() -> None:
    """A Python function or a submodule in the graph may hold state the text does not show."""
    scale = 3.0

    def closure(x: torch.Tensor) -> torch.Tensor:
        return x * scale

    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(closure, (x,)))
    assert fx_graph_key(torch.fx.GraphModule(torch.nn.Module(), g), [torch.zeros(2)]) is None
    traced = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    assert fx_graph_key(traced, [torch.zeros(1, 2)]) is None  # call_module

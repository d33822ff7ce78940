"""``torchneuron.reset()`` resets every layer and ``torchneuron.stats()`` gathers every
layer's counters, each in its own section equal to that layer's own report."""

from __future__ import annotations

import torch

import torchneuron
import torchneuron.adaptive_eager as ae
import torchneuron.compiler as tc
from torchneuron import hardware
from torchneuron.cache import store
from torchneuron.compiler.stats import record_fallback_run


def _work() -> None:
    x = torch.randn(4, 4).to("neuron")
    (x @ x + 1).cpu()
    record_fallback_run("some_graph")  # a compiler counter, without a slow first compile


def test_stats_gathers_each_layers_own_counters() -> None:
    torchneuron.reset()
    _work()
    s = torchneuron.stats()
    assert list(s)[:5] == ["hardware", "dispatch", "compiler", "cache", "adaptive_eager"]
    assert s["hardware"]["neuron:0"] == hardware.get_core(0).stats()
    assert s["dispatch"]["executed_ops"] == torchneuron.executed_ops()
    assert s["dispatch"]["executed_ops"].get("mm", 0) >= 1
    assert s["compiler"] == tc.stats()
    assert s["compiler"]["eager_fallback_runs"] == {"some_graph": 1}
    assert s["cache"] == store.default_store_stats()
    assert s["adaptive_eager"] == ae.stats()


def test_reset_resets_every_layer() -> None:
    _work()
    ae_before = ae._runtime
    torchneuron.reset()
    s = torchneuron.stats()
    assert s["hardware"] == {}  # every core forgotten: a fresh clock on next use
    assert hardware.get_core(0).now == 0
    assert s["dispatch"] == {"executed_ops": {}, "fallback_ops": {}, "fallback_reasons": {}}
    assert s["compiler"]["eager_fallback_runs"] == {}
    assert s["cache"] == {}
    assert ae._runtime is not ae_before and s["adaptive_eager"]["ops_recorded"] == 0

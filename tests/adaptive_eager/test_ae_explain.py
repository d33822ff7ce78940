"""``explain()`` says what a user can act on (issue 20, deliverable 5).

Each test is a situation met on real code whose text misled: regions too short to pay
listed one by one as "state aborted"; "N went on from another variant" unexplained; a
compile failure advising an edit of the compiler's own files; a region compiled after
its loop had ended reported as "still compiling"; executables loaded from the compile
cache not counted as cache hits in the headline.
"""

from __future__ import annotations

import re

import pytest
import torch

import torchneuron.adaptive_eager as ae
from torchneuron.adaptive_eager.explain import explain_region
from torchneuron.adaptive_eager.region import Region, State
from torchneuron.compiler import CompileError, compile_graph
from torchneuron.hardware.settings import override


def _loop(steps: int = 6, refused: bool = False) -> list[float]:
    """A small loop with a sync per step (``.item()``): one region per step."""
    w = torch.linspace(-1, 1, 16).reshape(4, 4).to("neuron")
    x = torch.ones(4, 4, device="neuron")
    out = []
    for _ in range(steps):
        x = torch.tanh(x @ w + 0.5) * 0.9
        if refused:
            x = x + torch.igamma(x.abs() + 1, x * x + 1) * 0.1  # no lowering
        out.append(x.sum().item())
    return out


def test_regions_too_short_to_pay_are_one_summary_line() -> None:
    with override(ae_min_gain_ns=10**12), ae.enabled():  # nothing pays
        _loop()
    text = ae.explain()
    refused = [r for r in ae.regions() if r.state is State.ABORTED]
    assert refused and all(r.reason.value == "no-gain" for r in refused), text
    assert "state aborted" not in text, text
    assert not any(f"region {r.key}" in text for r in refused), text
    sizes = sorted(len(r) for r in refused)
    span = str(sizes[0]) if sizes[0] == sizes[-1] else f"{sizes[0]}-{sizes[-1]}"
    line = f"{len(refused)} region{'s' if len(refused) > 1 else ''} of {span} ops not compiled: " \
        "predicted gain below cost"
    assert line in text, text


def test_a_replay_that_went_on_as_another_variant_is_explained() -> None:
    r = Region("k", (("op",),) * 3)
    r.state, r.replays, r.switched_in = State.READY, 5, 3
    text = explain_region(r, enabled=True, now_ns=0)
    assert "replays 5 (3 of them began as another region with the same first ops and went " \
        "on as this one" in text, text


def test_a_compile_failure_says_what_happens_and_how_to_report_it() -> None:
    with pytest.raises(CompileError) as err:
        compile_graph(lambda a: torch.igamma(a, a), [torch.rand(3)])
    for message in (str(err.value), None):
        if message is None:  # the same failure met by adaptive eager
            with ae.enabled():
                _loop(refused=True)
            message = ae.explain()
            assert "compile-failed: the compiler cannot handle aten.igamma" in message
            assert "The region runs eagerly, with eager's results" in message
        assert "runs eagerly" in message and "To report it" in message, message
        assert "compiler/" not in message and "add a decomposition" not in message, message


def test_a_region_ready_after_its_loop_ended_is_not_still_compiling() -> None:
    with override(compile_latency=True, cache=False):  # modeled compile: far beyond 6 steps
        with ae.enabled():
            _loop()
            during = ae.explain()
        after = ae.explain()
    late = [r for r in ae.regions() if r.state is State.COMPILING]
    # (the first tier replays them meanwhile; their programs never did)
    assert late and all(r.replays == r.first_tier_replays for r in late), after
    assert "compile-pending" in during, during  # while the run goes on, it is compiling
    assert "compiling" not in after and "compile-pending" not in after, after
    assert "state compiled, program never replayed" in after, after
    assert "the loop it served ended" in after, after

    # compile done on the simulated clock, but its first op never came again
    r = late[0]
    text = explain_region(r, enabled=False, now_ns=r.ready_at_ns + 1)
    assert "state ready" in text and "not replayed" in text and "loop it served ended" in text


def test_executables_from_the_cache_are_cache_hits_in_the_headline() -> None:
    with ae.enabled():
        first = _loop()
    compiled = ae.stats()["compilations"]
    ae.reset()  # a new run: the executables are in this test's compile cache
    with ae.enabled():
        second = _loop()
    s, text = ae.stats(), ae.explain()
    assert compiled >= 1 and s["compilations"] == 0 and s["cache_hits"] >= 1, text
    head = text.splitlines()[0]
    assert re.search(rf"\b{s['cache_hits']} cache hits\b", head), head
    assert "from the compile cache" in text, text
    assert first == pytest.approx(second, rel=1e-6)


def test_a_region_whose_compile_already_failed_is_not_promised_a_replay() -> None:
    """The run ends before the modeled compile is done, but its real compile (started at
    the end for the compile cache) failed: no "a longer run replays it"."""
    from torchneuron.run import summary

    with override(compile_latency=True):
        with ae.enabled():
            _loop(refused=True)
        text = ae.explain()
    failed = [r for r in ae.regions() if r.known_compile_error() is not None]
    assert failed and "state compile failed" in text, text
    assert "its real compile already failed" in text, text
    assert "cannot handle aten.igamma" in text and "a longer run replays it" not in text, text
    assert "failed (see explain() above)" in summary(0).splitlines()[-1]

"""Divergence suite: whatever the stream does differently, eager's results and errors."""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path

import pytest
import torch

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import ReplayLog, assert_same, run
from torchneuron.hardware.settings import override

STEPS = 8
K = 5  # the step that diverges (regions replay from step 3)


def _program(case: str):
    def loop(device: str) -> dict:
        g = torch.Generator().manual_seed(7)
        w = torch.randn(8, 8, generator=g).to(device)
        b = torch.randn(8, generator=g).to(device)
        outs, errors = [], []
        for step in range(STEPS):
            x = torch.randn(4, 8, generator=g).to(device)
            if case == "input-mutated" and step == K:
                w.mul_(0.5)  # an input of the region changes in place between steps
            try:
                h = torch.tanh(x @ w + b)
                if case == "different-op" and step == K:
                    h = torch.sigmoid(h)
                if case == "shape-change" and step == K:
                    h = h[:2]
                if case == "swapped":  # two pending values trade places (and metadata)
                    z = (h.t() * 2).t()  # h's shape, other strides and values
                    if step == K:
                        torch.utils.swap_tensors(h, z)
                    del z
                if case == "data-set" and step == K:  # same shape, other strides
                    h.data = h.t().contiguous().t() * 3
                if case == "intermediate-read" and step == K:
                    outs.append(torch.tensor([h.sum().item()]))
                if case == "host-data" and step == K:
                    h = h + torch.tensor([1.0] * 8, device=device)
                if case == "exception" and step == K:
                    h = h @ torch.ones(3, 3, device=device)  # wrong shape: eager raises
                h = h * 2 - 1
                y = (h @ w.t()).relu()
                if case == "branch":
                    # direction flips at step K: a sync (is_nonzero) decides the next ops
                    up = bool(y.sum() > 0) != (step >= K)
                    y = y * 3
                    y = (y.tanh() if up else y.sigmoid()) * 2
                y = y.sum(1)
                outs.append(y)
                outs.append(torch.tensor([y.mean().item()]))
            except RuntimeError as e:
                errors.append(f"{type(e).__name__}: {str(e).splitlines()[0]}")
        return {"outs": torch.cat([o.cpu().flatten() for o in outs]), "w": w,
                "_errors": errors}
    return loop


# An index or class target, out of range at step K only: the op that takes it, the index
# row that goes bad, and whether the region computes the op's index from it (a reshape).
# Multilabel targets: eager checks every entry of a row, also after the -1 that ends its
# labels (here 7 of 4 classes); the executable cannot check a computed margin target
# (PyTorch's own decomposition runs first), so such an op side-exits on every replay.
_BAD_INDEX = {
    "embedding": (lambda t, x: torch.nn.functional.embedding(t, x), [1, 2, 3], [1, 2, 12]),
    "multilabel_margin": (lambda t, x: torch.nn.functional.multilabel_margin_loss(
        x[:1, :4], t), [[3, 0, -1, 1]], [[3, 0, -1, 7]]),
    "multilabel_margin_computed": (lambda t, x: torch.nn.functional.multilabel_margin_loss(
        x[:1, :4], t.reshape(1, 4)), [3, 0, -1, 1], [3, 0, -1, 7]),
    "multi_margin": (lambda t, x: torch.nn.functional.multi_margin_loss(x[:3, :4], t),
                     [3, 0, 1], [3, 0, 4]),
}


@pytest.mark.parametrize("op", list(_BAD_INDEX))
def test_out_of_range_index_raises_eagers_error(op: str) -> None:
    fn, good, bad = _BAD_INDEX[op]

    def loop(device: str) -> dict:
        torch.manual_seed(0)
        x = torch.randn(10, 4).to(device)
        outs, errors = [], []
        for step in range(STEPS):
            idx = torch.tensor(bad if step == K else good).to(device)
            try:
                outs.append(torch.tensor([(fn(idx, x) * 2).relu().sum().item()]))
            except (IndexError, RuntimeError) as e:
                errors.append(f"{type(e).__name__}: {str(e).splitlines()[0]}")
        return {"outs": torch.cat(outs), "_errors": errors}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert eager["_errors"] and adaptive["_errors"] == eager["_errors"]
    assert_same(eager, adaptive)
    exits = ae.stats()["fallback_reasons"].get("index-out-of-range", 0)
    assert exits >= 1 if op.endswith("_computed") else exits == 1, ae.explain()


def test_an_index_computed_in_a_replayed_region_out_of_range_raises_eagers_error() -> None:
    # The guard sees only index inputs; an index the region computes reaches the
    # executable, whose post-run check (compiler/index_bounds.py) raises eager's error.
    def loop(device: str) -> dict:
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 4).to(device)
        outs, errors = [], []
        for step in range(STEPS):
            ids = torch.tensor([1, 2, 6 if step == K else 3]).to(device)
            try:
                j = ids * 2 - 1  # 11 at step K
                outs.append(torch.tensor([(emb(j) * 2).relu().sum().item()]))
            except (IndexError, RuntimeError) as e:
                errors.append(f"{type(e).__name__}: {str(e).splitlines()[0]}")
        return {"outs": torch.cat(outs), "_errors": errors}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert eager["_errors"] and adaptive["_errors"] == eager["_errors"]
    assert_same(eager, adaptive)
    assert ae.stats()["replays"] >= 1, ae.explain()


@pytest.mark.parametrize("first", [True, False], ids=["first-replay", "later-replay"])
def test_a_computed_index_out_of_range_leaves_eagers_state(first: bool) -> None:
    # A write before the failing op (``acc.add_``) is made in eager. The executable's
    # check (or, on the region's first replay, verification's eager reference) finds the
    # bad index after the run, before any write-back: the replay then runs its deferred
    # ops eagerly from the unchanged inputs, so the write and the error are eager's, and
    # so is every later step. The dropout draws again in the redo: the generator must be
    # where the executable found it, so the masks and every later draw are eager's.
    k = -1
    replayed = ReplayLog()

    def loop(device: str) -> dict:
        torch.manual_seed(0)
        table = torch.randn(10, 4, device=device)  # the device draws the CPU's numbers
        acc = torch.zeros(4, device=device)
        outs, errors = [], []
        for step in range(STEPS):
            ids = torch.tensor([1, 2, 6 if step == k else 3]).to(device)
            try:
                acc.add_(torch.nn.functional.dropout(torch.ones(4, device=device), 0.5))
                r = table[ids * 2 - 1].relu().sum(0)  # 11 at step k: out of range
                acc.mul_(0.5).add_(r)
                outs.append(torch.tensor([acc.sum().item()]))
            except (IndexError, RuntimeError) as e:
                errors.append(f"{type(e).__name__}: {str(e).splitlines()[0]}")
            replayed.mark(step)
        after = torch.rand(4, device=device)  # where the generator is after the loop
        return {"outs": torch.cat(outs), "acc": acc, "after": after, "_errors": errors}

    run(loop, "neuron", adaptive=True)  # no bad index: which steps replay
    ae.reset()
    k = replayed.steps[0] if first else replayed.steps[-2]
    reason = "reference-raised" if first else "index-out-of-range"
    cpu = run(loop, "cpu")
    adaptive = run(loop, "neuron", adaptive=True)
    assert len(cpu["_errors"]) == 1 and adaptive["_errors"] == cpu["_errors"]
    assert_same(cpu, adaptive)
    s = ae.stats()
    assert s["replays"] >= 1 and s["fallback_reasons"].get(reason) == 1, ae.explain()


@pytest.mark.parametrize("case", ["branch", "different-op", "shape-change", "intermediate-read",
                                  "input-mutated", "exception", "host-data", "swapped",
                                  "data-set"])
def test_divergence_gives_eager_results_and_errors(case: str) -> None:
    eager = run(_program(case), "neuron")
    adaptive = run(_program(case), "neuron", adaptive=True)
    assert_same(eager, adaptive)
    assert adaptive["_errors"] == eager["_errors"]
    if case == "exception":
        assert len(eager["_errors"]) == 1
    s = ae.stats()
    assert s["replays"] >= 1, ae.explain()
    if case in ("different-op", "intermediate-read", "exception", "host-data", "branch",
                "swapped", "data-set"):
        assert s["side_exits"] >= 1, ae.explain()
        assert sum(s["fallback_reasons"].values()) >= s["side_exits"]


@pytest.mark.parametrize("when", ["once", "every-step"])
def test_host_copy_into_a_tensor_the_region_used(when: str) -> None:
    # copy_ from the host into a weight the region already read: once (a replay in
    # progress must run its deferred ops on the old values first) or every step (the
    # recorded region is cut there); eager's numbers either way
    def loop(device: str) -> dict:
        g = torch.Generator().manual_seed(12)
        w = torch.randn(8, 8, generator=g).to(device)
        outs = []
        for step in range(STEPS):
            x = torch.randn(4, 8, generator=g).to(device)
            h = (x @ w).tanh() * 2
            if when == "every-step" or step == K:
                w.copy_(torch.randn(8, 8, generator=g))
            y = (h @ w).relu().sum(1) - 1
            outs.append(y)
            outs.append(torch.tensor([y.mean().item()]))
        return {"outs": torch.cat([o.cpu().flatten() for o in outs]), "w": w}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive)
    s = ae.stats()
    assert s["replays"] >= 1, ae.explain()
    if when == "once":
        assert s["fallback_reasons"].get("host-copy-into-region-input") == 1, ae.explain()
    else:  # the segment is cut at the copy when recorded: no replay ever holds it
        assert "host-copy-into-region-input" not in s["fallback_reasons"], ae.explain()


def _line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (once)."""
    lines = [n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
             if text.rstrip().endswith(marker)]
    assert len(lines) == 1, marker
    return lines[0]


@pytest.mark.parametrize("case", ["index-out-of-range", "shape-error"])
def test_an_error_inside_a_replayed_region_points_at_the_users_line(case: str) -> None:
    # Issue 8: an error raised by a deferred op has eager's type and message and points
    # at the user's line that issued it, not at the region's end (the ``.item()``).
    def loop(device: str) -> dict:
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 4).to(device)
        errors = []
        for step in range(STEPS):
            bad = step == K
            idx = torch.tensor([1, 2, 12 if bad and case == "index-out-of-range" else 3])
            try:
                h = emb(idx.to(device))  # <- index-out-of-range
                w = torch.ones(3 if bad and case == "shape-error" else 4, 2, device=device)
                h = (h * 2) @ w  # <- shape-error
                h.relu().sum().item()
            except (IndexError, RuntimeError) as e:
                frames = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                          if f.filename == __file__]
                errors.append((type(e).__name__, str(e).splitlines()[0], frames[-1]))
        return {"_errors": errors}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    s = ae.stats()
    assert s["replays"] >= 1 and s["side_exits"] >= 1, ae.explain()  # step K was replaying
    assert len(eager["_errors"]) == 1 and adaptive["_errors"] == eager["_errors"]
    assert adaptive["_errors"][0][2] == _line_of(f"# <- {case}"), adaptive["_errors"]


@pytest.mark.parametrize("op", ["index", "gather"])
def test_an_index_the_region_computes_raises_at_the_users_line(op: str) -> None:
    # Issue 8: the index is a value of the replaying region, so its range is known only
    # when the executable runs at the region's end (the ``.item()`` two lines later);
    # the error still has eager's type and message, and its traceback ends at the line
    # that issued the indexing op, as eager's does (``adaptive_eager/issued.py``).
    def loop(device: str) -> dict:
        torch.manual_seed(0)
        table = torch.randn(10, 4, device=device)
        acc = torch.zeros(4, device=device)
        errors = []
        for step in range(STEPS):
            ids = torch.tensor([1, 2, 6 if step == K else 3]).to(device)
            try:
                j = ids * 2 - 1  # 11 at step K: out of range
                r = table[j] if op == "index" else table.gather(0, j[:, None].expand(3, 4))  # <- issued
                acc.mul_(0.5).add_(r.relu().sum(0))
                acc.sum().item()
            except (IndexError, RuntimeError) as e:
                frames = [f for f in traceback.extract_tb(e.__traceback__)
                          if f.filename == __file__]
                errors.append((type(e).__name__, str(e).splitlines()[0], frames[-1].lineno,
                               frames[-1].line))
                errors.append("".join(traceback.format_exception(e)))
        return {"acc": acc, "_errors": errors}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    s = ae.stats()
    assert s["replays"] >= 1 and s["fallback_reasons"].get("index-out-of-range") == 1, \
        ae.explain()  # step K was replaying, and the executable's check found the index
    assert_same(eager, adaptive)
    assert len(eager["_errors"]) == 2 and adaptive["_errors"][0] == eager["_errors"][0]
    line = _line_of("# <- issued")
    assert adaptive["_errors"][0][2] == line, adaptive["_errors"][1]
    assert f'line {line}, in loop\n    r = table[j]' in adaptive["_errors"][1]
    assert "During handling" not in adaptive["_errors"][1]  # our detection is not chained


@pytest.mark.parametrize("case", ["no-grad", "autocast"])
def test_grad_mode_or_autocast_changing_at_step_k(case: str) -> None:
    # The guard checks grad mode and autocast state with each op: step K, run under
    # ``no_grad`` or ``autocast``, does not replay (its first op already differs, so no
    # replay starts and nothing is deferred) and gives eager's values, dtypes and
    # requires_grad; the steps after it replay again.
    log = ReplayLog()

    def loop(device: str) -> dict:
        g = torch.Generator().manual_seed(9)
        w = torch.randn(8, 8, generator=g).to(device).requires_grad_()
        outs, flags = [], []
        for step in range(STEPS):
            x = torch.randn(4, 8, generator=g).to(device)
            if step != K:
                ctx = contextlib.nullcontext()
            elif case == "no-grad":
                ctx = torch.no_grad()
            else:
                ctx = torch.autocast(device if device == "neuron" else "cpu", dtype=torch.bfloat16)
            with ctx:
                y = (x @ w).tanh() * 2
            flags.append((y.requires_grad, str(y.dtype)))
            outs.append(y.detach().float().cpu().flatten())
            outs.append(torch.tensor([y.float().sum().item()]))
            log.mark(step)
        return {"outs": torch.cat(outs), "_flags": flags}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert adaptive["_flags"] == eager["_flags"]
    assert_same(eager, adaptive)
    assert log.steps and K not in log.steps and K + 1 in log.steps, (log.steps, ae.explain())


@pytest.mark.parametrize("case", ["read-view-after-write", "write-view-then-read"])
def test_inputs_on_one_storage_used_through_views_give_eager_results(case: str) -> None:
    """A weight and its transpose enter a region as two inputs. A view of one read after
    the other is written (or a write through a view of one, the other read after) must
    see the write, as eager does: the graph takes its inputs as independent values, so
    such a region runs eagerly (``aliased-inputs``)."""
    def loop(device: str) -> dict:
        w = torch.randn(4, 4).to(device)
        wt = w.t()
        ys = []
        for _ in range(10):
            if case == "read-view-after-write":
                v = wt[0]
                w.add_(0.5)
            else:
                w[0].add_(0.5)
                v = wt
            ys.append(((v * 2.0).tanh() * 3.0 + 1.0).sin().cpu())  # a sync every step
        return {"ys": torch.stack(ys), "w": w}

    with override(verify=False, ae_verify_first_replay=False):  # the region must be right
        eager = run(loop, "neuron")
        adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive, rtol=0, atol=0)


def test_a_deep_copied_tensor_is_not_the_tensor_it_was_copied_from() -> None:
    """``copy.deepcopy`` copies a tensor's ``__dict__``: a frozen copy (a target network,
    an EMA teacher) refreshed every few steps must not be replayed as the live tensor."""
    import copy

    def loop(device: str) -> dict:
        w = torch.randn(4, 4).to(device)
        ys = []
        for step in range(12):
            if step % 4 == 0:
                target = copy.deepcopy(w)
            y = ((w * 2.0).tanh() * 3.0 + 1.0).sin() + (target * 0.5).cos()
            w.add_(y * 0.1)
            ys.append(y.cpu())
        return {"ys": torch.stack(ys), "w": w}

    with override(verify=False, ae_verify_first_replay=False):  # the region must be right
        eager = run(loop, "neuron")
        adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive, rtol=0, atol=0)


@pytest.mark.parametrize("how", ["data", "swap_tensors"])
def test_an_input_given_another_buffer_mid_region_gives_eager_results(how: str) -> None:
    """``w.data = other`` or ``swap_tensors(w, other)`` between two uses of ``w`` in a
    region: the ops before ran, in eager, on ``w``'s old buffer, those after on the new."""
    def loop(device: str) -> dict:
        a = torch.randn(4, 4).to(device)
        ws = [torch.randn(4, 4).to(device) for _ in range(12)]
        zs = []
        for step in range(12):
            w = ws[step]
            y = ((a * w).tanh() * 2.0 + 1.0).sin()
            if step >= 4:
                other = ws[(step + 5) % 12]
                if how == "data":
                    w.data = other
                else:
                    torch.utils.swap_tensors(w, other)
            zs.append(((y + w).cos() * 3.0).tanh().cpu())
        return {"zs": torch.stack(zs), "ws": torch.stack([w.cpu() for w in ws])}

    with override(verify=False, ae_verify_first_replay=False):  # the region must be right
        eager = run(loop, "neuron")
        adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive, rtol=0, atol=0)

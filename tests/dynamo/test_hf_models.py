"""Hugging Face models compile with their default calls and give eager's numbers.

Small random-weight models built from a config (``HF_HUB_OFFLINE=1``: nothing is
downloaded). Skipped with a reason when ``transformers`` is not installed (it is a
test extra in pyproject.toml).
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

import torchneuron.compiler as tc

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                   "(pip install -e '.[test]')")

pytestmark = pytest.mark.slow
_TOL = {"rtol": 1e-4, "atol": 1e-5}


def test_gpt2_default_call_with_cache_compiles_and_matches() -> None:
    """GPT-2's default forward builds its cache with ``torch.tensor(..., device=...)``."""
    torch._dynamo.reset()
    tc.reset_stats()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128,
                                  n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    dev = copy.deepcopy(model).to("neuron")
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        want = model(ids)
        got = torch.compile(dev, backend="neuron")(ids.to("neuron"))
    assert got.past_key_values is not None  # the cache path ran
    torch.testing.assert_close(got.logits.cpu(), want.logits, **_TOL)
    for a, b in zip(want.past_key_values.layers, got.past_key_values.layers, strict=True):
        torch.testing.assert_close(b.keys.cpu(), a.keys, **_TOL)
        torch.testing.assert_close(b.values.cpu(), a.values, **_TOL)
    s = tc.stats()
    assert s["failures"] == 0 and s["compilations"] >= 1, tc.explain()


def _small_llama() -> torch.nn.Module:
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg)


def test_llama_forward_compiles_and_matches() -> None:
    torch._dynamo.reset()
    tc.reset_stats()
    torch.manual_seed(0)
    model = _small_llama().eval()
    dev = copy.deepcopy(model).to("neuron")
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        want = model(ids, labels=ids)
        got = torch.compile(dev, backend="neuron")(ids.to("neuron"), labels=ids.to("neuron"))
    torch.testing.assert_close(got.logits.cpu(), want.logits, **_TOL)
    torch.testing.assert_close(got.loss.cpu(), want.loss, **_TOL)
    s = tc.stats()
    assert s["failures"] == 0 and s["compilations"] >= 1, tc.explain()


def test_llama_forward_and_backward_compile_and_match() -> None:
    """Training step: the backward graph holds the rotary embedding's slice_scatter with
    an open end, which Torch-MLIR could not lower before corrections clamped it."""
    torch._dynamo.reset()
    tc.reset_stats()
    torch.manual_seed(0)
    model = _small_llama().train()
    dev = copy.deepcopy(model).to("neuron")
    ids = torch.randint(0, 128, (2, 8))
    want = model(ids, labels=ids)
    want.loss.backward()
    got = torch.compile(dev, backend="neuron")(ids.to("neuron"), labels=ids.to("neuron"))
    got.loss.backward()
    torch.testing.assert_close(got.loss.cpu(), want.loss, **_TOL)
    for (name, p), q in zip(model.named_parameters(), dev.parameters(), strict=True):
        assert q.grad is not None, name
        torch.testing.assert_close(q.grad.cpu(), p.grad, **_TOL, msg=name)
    s = tc.stats()
    assert s["failures"] == 0 and s["compilations"] >= 2, tc.explain()

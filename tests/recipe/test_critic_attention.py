"""Critics load with the attention their config names (recipe/cuda_agent/critic_attention.py).

veRL 0.9.1's ``load_valuehead_model`` asks transformers for flash-attn whatever the config says;
without ``flash_attn`` every stage with a critic failed at worker start. The plugin routes it
through ``critic_attention.load_value_model``; these tests load a small Llama as veRL's FSDP engine
does (``hf_config`` from ``AutoConfig`` with the override's ``attn_implementation``).
"""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [pytest.mark.verl]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("llama")
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _hf_config(folder, attention):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, attn_implementation=attention)
    config.num_labels = 1  # what veRL's engine sets before loading a critic
    return config


def test_the_plugin_routes_veRLs_critic_loader():
    import verl  # noqa: F401 - loads the plugin (entry point)
    from verl.utils import model as verl_model

    from cuda_agent.recipe import critic_attention

    assert verl_model.load_valuehead_model is critic_attention.load_value_model


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_critic_loads_with_the_configured_attention(llama_dir, attention):
    import torch
    from verl.utils.model import load_valuehead_model

    critic = load_valuehead_model(str(llama_dir), torch.float32, _hf_config(llama_dir, attention), False)
    assert type(critic).__name__ == "LlamaForTokenClassification"
    assert critic.config._attn_implementation == attention
    values = critic(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert values.shape == (1, 3, 1) and torch.isfinite(values).all()


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_flash_attention_still_goes_to_veRLs_own_loader(llama_dir):
    """A config that names flash-attn (veRL's default) is left to veRL: without the package it fails as
    before (veRL's error, transformers' flash-attn error as its cause), never silently on other attention."""
    import torch
    from verl.utils.model import load_valuehead_model

    with pytest.raises(RuntimeError, match="not a value head model") as raised:
        load_valuehead_model(str(llama_dir), torch.float32, _flash_config(llama_dir), False)
    assert "flash" in str(raised.value.__cause__).lower()


def _flash_config(folder):
    """A config naming flash_attention_2 without loading flash-attn (AutoConfig would check for it)."""
    config = _hf_config(folder, "sdpa")
    config._attn_implementation = "flash_attention_2"
    return config

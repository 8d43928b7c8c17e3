"""Seed operators from `transformers`: activations, norms, MLPs, attention, rotary embeddings, blocks.

Built from configuration objects only (no weights, nothing downloaded). Class names and
signatures move between transformers releases: `crawl` runs every seed once and drops the
ones the installed version does not support, with a warning. These operators are already
composite, so the composer never chains them (paper, section 1).
"""

from __future__ import annotations

import random

from cuda_agent.data_gen.ops.base import Category as C
from cuda_agent.data_gen.ops.base import Dims, InputSpec, OpCall, OpTemplate, Shape

_ROPE_POSITIONS = "position_ids = torch.arange({x}.shape[-2], device={x}.device).unsqueeze(0).expand({x}.shape[0], -1)"
_FIRST = "h[0] if isinstance(h, tuple) else h"


def hf_tokens(d: Dims) -> Shape:
    """(batch, seq, hidden) sized so that a block runs in milliseconds at the `large` preset."""
    return (max(1, d.batch // 8), d.seq, d.hidden)


def _head_count(d: Dims) -> int:
    return next(h for h in (d.heads, 8, 4, 2, 1) if d.hidden % h == 0)


def _params(s: Shape, d: Dims) -> dict:
    heads = _head_count(d)
    return {"hidden_size": s[-1], "intermediate_size": 2 * s[-1], "num_heads": heads,
            "num_kv_heads": max(1, heads // 2)}


def hf_op(
    op: str,
    modules: dict[str, str],
    call: str,
    imports: tuple[str, ...],
    *,
    category: C,
    pre: tuple[str, ...] = (),
    params: tuple[str, ...] = ("hidden_size",),
    extra: bool = False,
    seed=hf_tokens,
) -> OpTemplate:
    """A transformers operator; `params` picks which of the standard sizes become constructor arguments."""

    def build(s: Shape, d: Dims, r: random.Random) -> OpCall:
        everything = _params(s, d)
        return OpCall(call=call, modules=modules, params={k: everything[k] for k in params}, pre=pre,
                      imports=imports, extra_inputs=(InputSpec(s),) if extra else ())

    return OpTemplate(op=f"transformers.{op}", family="transformers", category=category, build=build,
                      seed_shape=seed, ranks=frozenset({3}), composable=False)


def _activations() -> list[OpTemplate]:
    names = ["gelu_new", "gelu_fast", "quick_gelu", "gelu_accurate", "gelu_10", "laplace", "relu2",
             "gelu_pytorch_tanh", "gelu_python", "mish", "silu", "sqrtsoftplus", "relu6"]
    return [
        hf_op(f"activations.{name}", {"act": f"get_activation({name!r})"}, "{m_act}({x})",
              ("from transformers.activations import get_activation",), category=C.ACTIVATION, params=(),
              seed=lambda d: (d.rows, d.features))
        for name in names
    ]


def _model(family: str) -> str:
    return f"transformers.models.{family}.modeling_{family}"


def _norms() -> list[OpTemplate]:
    norms = [("llama", "LlamaRMSNorm"), ("mistral", "MistralRMSNorm"), ("qwen2", "Qwen2RMSNorm"),
             ("qwen3", "Qwen3RMSNorm"), ("gemma", "GemmaRMSNorm"), ("t5", "T5LayerNorm"),
             ("mixtral", "MixtralRMSNorm"), ("phi3", "Phi3RMSNorm"), ("olmo", "OlmoLayerNorm"),
             ("cohere", "CohereLayerNorm"), ("granite", "GraniteRMSNorm"), ("deepseek_v3", "DeepseekV3RMSNorm")]
    return [
        hf_op(f"models.{fam}.{cls}", {"norm": f"{cls}({{hidden_size}})"}, "{m_norm}({x})",
              (f"from {_model(fam)} import {cls}",), category=C.NORM)
        for fam, cls in norms
    ]


def _config_mlps() -> list[OpTemplate]:
    sized = "hidden_size={hidden_size}, intermediate_size={intermediate_size}"
    mlps = [
        ("llama", "LlamaMLP", "LlamaConfig", sized + ", hidden_act='silu'"),
        ("mistral", "MistralMLP", "MistralConfig", sized),
        ("qwen2", "Qwen2MLP", "Qwen2Config", sized),
        ("gemma", "GemmaMLP", "GemmaConfig", sized + ", hidden_activation='gelu_pytorch_tanh'"),
        ("phi3", "Phi3MLP", "Phi3Config", sized),
        ("gpt_neox", "GPTNeoXMLP", "GPTNeoXConfig", sized + ", num_attention_heads={num_heads}"),
        ("olmo", "OlmoMLP", "OlmoConfig", sized),
        ("bert", "BertIntermediate", "BertConfig", sized),
        ("clip", "CLIPMLP", "CLIPVisionConfig", sized + ", num_attention_heads={num_heads}"),
        ("t5", "T5DenseActDense", "T5Config", "d_model={hidden_size}, d_ff={intermediate_size}, dropout_rate=0.0"),
        ("t5", "T5DenseGatedActDense", "T5Config",
         "d_model={hidden_size}, d_ff={intermediate_size}, dropout_rate=0.0, feed_forward_proj='gated-gelu'"),
        ("falcon", "FalconMLP", "FalconConfig", "hidden_size={hidden_size}, ffn_hidden_size={intermediate_size}"),
    ]
    return [
        hf_op(f"models.{fam}.{cls}", {"mlp": f"{cls}({cfg}({args}))"}, "{m_mlp}({x})",
              (f"from {_model(fam)} import {cls}", f"from transformers import {cfg}"), category=C.OTHER,
              params=("hidden_size", "intermediate_size", *(("num_heads",) if "{num_heads}" in args else ())))
        for fam, cls, cfg, args in mlps
    ]


def _other_mlps() -> list[OpTemplate]:
    return [
        hf_op("models.gpt2.GPT2MLP", {"mlp": "GPT2MLP({intermediate_size}, GPT2Config(n_embd={hidden_size}, resid_pdrop=0.0))"},
              "{m_mlp}({x})", ("from transformers.models.gpt2.modeling_gpt2 import GPT2MLP",
                               "from transformers import GPT2Config"),
              category=C.OTHER, params=("hidden_size", "intermediate_size")),
        hf_op("pytorch_utils.Conv1D", {"proj": "Conv1D({intermediate_size}, {hidden_size})"}, "{m_proj}({x})",
              ("from transformers.pytorch_utils import Conv1D",), category=C.ANCHOR,
              params=("hidden_size", "intermediate_size")),
        hf_op("models.bert.BertOutput",
              {"out": "BertOutput(BertConfig(hidden_size={hidden_size}, intermediate_size={hidden_size}, "
                      "hidden_dropout_prob=0.0))"},
              "{m_out}({x}, {x1})", ("from transformers.models.bert.modeling_bert import BertOutput",
                                     "from transformers import BertConfig"), category=C.OTHER, extra=True),
        _moe(),
    ]


def _moe() -> OpTemplate:
    return hf_op(
        "models.mixtral.MixtralSparseMoeBlock",
        {"moe": "MixtralSparseMoeBlock(MixtralConfig(hidden_size={hidden_size}, intermediate_size={intermediate_size}, "
                "num_local_experts=4, num_experts_per_tok=2, experts_implementation='eager'))"},
        _FIRST, ("from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock",
                 "from transformers import MixtralConfig"),
        category=C.OTHER, params=("hidden_size", "intermediate_size"), pre=("h = {m_moe}({x})",))


def _rope_attention(fam: str, prefix: str, cfg: str) -> OpTemplate:
    config = (f"{cfg}(hidden_size={{hidden_size}}, num_attention_heads={{num_heads}}, "
              f"num_key_value_heads={{num_kv_heads}}, attn_implementation='eager')")
    return hf_op(
        f"models.{fam}.{prefix}Attention",
        {"rotary": f"{prefix}RotaryEmbedding({config})", "attn": f"{prefix}Attention({config}, layer_idx=0)"},
        "{m_attn}({x}, position_embeddings=(cos, sin), attention_mask=None)[0]",
        (f"from {_model(fam)} import {prefix}Attention, {prefix}RotaryEmbedding", f"from transformers import {cfg}"),
        category=C.ATTENTION, params=("hidden_size", "num_heads", "num_kv_heads"),
        pre=(_ROPE_POSITIONS, "cos, sin = {m_rotary}({x}, position_ids)"))


def _rope_block(fam: str, prefix: str, cfg: str) -> OpTemplate:
    config = (f"{cfg}(hidden_size={{hidden_size}}, intermediate_size={{intermediate_size}}, "
              f"num_attention_heads={{num_heads}}, num_key_value_heads={{num_kv_heads}}, attn_implementation='eager')")
    return hf_op(
        f"models.{fam}.{prefix}DecoderLayer",
        {"rotary": f"{prefix}RotaryEmbedding({config})", "layer": f"{prefix}DecoderLayer({config}, layer_idx=0)"},
        _FIRST,
        (f"from {_model(fam)} import {prefix}DecoderLayer, {prefix}RotaryEmbedding", f"from transformers import {cfg}"),
        category=C.ATTENTION, params=("hidden_size", "intermediate_size", "num_heads", "num_kv_heads"),
        pre=(_ROPE_POSITIONS, "cos, sin = {m_rotary}({x}, position_ids)",
             "h = {m_layer}({x}, attention_mask=None, position_embeddings=(cos, sin))"))


def _rotary() -> OpTemplate:
    config = "LlamaConfig(hidden_size={hidden_size}, num_attention_heads={num_heads})"
    return hf_op(
        "models.llama.apply_rotary_pos_emb", {"rotary": f"LlamaRotaryEmbedding({config})"},
        "apply_rotary_pos_emb({x}, {x1}, cos, sin)[0]",
        ("from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb",
         "from transformers import LlamaConfig"),
        category=C.ATTENTION, params=("hidden_size", "num_heads"),
        pre=(_ROPE_POSITIONS, "cos, sin = {m_rotary}({x}, position_ids)"),
    )


def _rotary_template() -> OpTemplate:
    base = _rotary()

    def build(s: Shape, d: Dims, r: random.Random) -> OpCall:
        heads = _head_count(d)
        call = base.build((s[0], s[2], heads * s[3]), d, r)
        return OpCall(call=call.call, modules=call.modules, params={"hidden_size": heads * s[3], "num_heads": heads},
                      pre=call.pre, imports=call.imports, extra_inputs=(InputSpec(s),))

    return OpTemplate(op=base.op, family=base.family, category=base.category, build=build,
                      seed_shape=lambda d: (max(1, d.batch // 8), _head_count(d), d.seq, d.hidden // _head_count(d)),
                      ranks=frozenset({4}), composable=False)


def _plain_attention() -> list[OpTemplate]:
    def attn(fam, cls, cfg, args, ctor_suffix=""):
        return hf_op(f"models.{fam}.{cls}", {"attn": f"{cls}({cfg}({args}){ctor_suffix})"}, "{m_attn}({x})[0]",
                     (f"from {_model(fam)} import {cls}", f"from transformers import {cfg}"), category=C.ATTENTION,
                     params=("hidden_size", "num_heads"))
    heads = "hidden_size={hidden_size}, num_attention_heads={num_heads}"
    return [
        attn("gpt2", "GPT2Attention", "GPT2Config", "n_embd={hidden_size}, n_head={num_heads}, "
             "attn_pdrop=0.0, resid_pdrop=0.0, attn_implementation='eager'", ", layer_idx=0"),  # no dropout
        attn("bert", "BertSelfAttention", "BertConfig", heads + ", attention_probs_dropout_prob=0.0, "
             "attn_implementation='eager'"),
        attn("clip", "CLIPAttention", "CLIPVisionConfig", heads + ", attn_implementation='eager'"),
        attn("vit", "ViTAttention", "ViTConfig", heads + ", attn_implementation='eager'"),
    ]


def templates() -> list[OpTemplate]:
    """Every transformers seed operator (some may not exist in the installed version)."""
    rope = [("llama", "Llama", "LlamaConfig"), ("mistral", "Mistral", "MistralConfig"),
            ("qwen2", "Qwen2", "Qwen2Config")]
    return [
        *_activations(), *_norms(), *_config_mlps(), *_other_mlps(),
        *[_rope_attention(*r) for r in rope], *[_rope_block(*r) for r in rope[:2]],
        _rotary_template(), *_plain_attention(),
    ]


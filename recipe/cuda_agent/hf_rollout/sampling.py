"""What one generate request asks for, resolved by the rules of veRL's vLLM server.

``AgentLoopWorker`` sends ``temperature, top_p, top_k (-1 = off), repetition_penalty, logprobs``
and our loops add ``max_tokens``; veRL 0.9.1's ``vLLMHttpServer.generate`` turns that into
vLLM ``SamplingParams``. This module applies the same rules, so a loop cannot tell the two
servers apart by the lengths or the stop it gets.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class UnsupportedSampling(ValueError):
    """A sampling parameter this server does not implement (it would be silently ignored otherwise)."""


class SamplingRequest(BaseModel):
    """One request, resolved: every field is what the engine will do."""

    model_config = ConfigDict(frozen=True)

    max_tokens: int = Field(ge=1)
    temperature: float = Field(ge=0.0)
    top_p: float = Field(gt=0.0, le=1.0)
    top_k: int  # <= 0: off
    want_log_probs: bool
    ignore_eos: bool

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def batch_key(self) -> tuple:
        """Requests with the same key can share one decoding batch (same token selection rule)."""
        return (self.temperature, self.top_p, self.top_k, self.ignore_eos)


# Parameters that change what is sampled and that we do not implement: refused, not ignored.
_NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0,
            "n": 1, "stop": None, "stop_token_ids": None}
_KNOWN = {"max_tokens", "max_new_tokens", "temperature", "top_p", "top_k", "logprobs", "ignore_eos",
          "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
          "detokenize",
          "seed"}  # accepted: the engine's generator is seeded once, from rollout.seed and the replica rank


def resolve(
    sampling_params: dict[str, Any],
    *,
    prompt_len: int,
    max_model_len: int,
    prompt_length: int,
    response_length: int,
    ignore_eos_default: bool = False,
) -> SamplingRequest:
    """The request as the vLLM server would run it.

    ``max_tokens``: the caller's (or sglang-style ``max_new_tokens``), else
    ``min(response_length, prompt_length + response_length - prompt_len)``; then clamped to
    ``[1, max_model_len - prompt_len]``. A prompt that leaves no room raises, as vLLM's does.
    """
    room = max_model_len - prompt_len
    if room < 1:
        raise ValueError(
            f"Prompt length ({prompt_len}) leaves no room to generate within the model's maximum context "
            f"length ({max_model_len}); need at least 1 token of headroom."
        )
    params = dict(sampling_params)
    for name, neutral in _NEUTRAL.items():
        value = params.pop(name, neutral)
        if value != neutral:
            raise UnsupportedSampling(
                f"the hf rollout server does not implement {name}={value!r} (only {neutral!r}); "
                f"use rollout.name=vllm for it, or drop it from the sampling parameters"
            )
    unknown = set(params) - _KNOWN
    if unknown:
        raise UnsupportedSampling(f"the hf rollout server does not know the sampling parameters {sorted(unknown)}")
    if "max_tokens" in params:
        max_tokens = params["max_tokens"]
    elif "max_new_tokens" in params:
        max_tokens = params["max_new_tokens"]
    else:
        max_tokens = min(response_length, prompt_length + response_length - prompt_len)
    top_k = params.get("top_k", -1)
    return SamplingRequest(
        max_tokens=max(1, min(int(max_tokens), room)),
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=-1 if top_k is None else int(top_k),
        want_log_probs=bool(params.get("logprobs", False)),
        ignore_eos=bool(params.get("ignore_eos", ignore_eos_default)),
    )

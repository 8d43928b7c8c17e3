"""The transformers model behind the rollout server: batched decoding and weight loading.

Decoding is our own loop over the model's forward with its KV cache, not ``model.generate``:
``generate`` merges the checkpoint's ``generation_config`` into every call (a default
``top_k=50``, a repetition penalty) and would sample from a different distribution than the one
the trainer scores. Here the rule is explicit and the same as vLLM's: scale the logits by the
temperature, keep the top-k / top-p tokens (transformers' own warpers), sample; the log-prob
returned for the sampled token is ``log_softmax(logits / T)`` in fp32, the quantity veRL's
actor recomputes and rollout correction compares (vLLM's ``processed_logprobs``; identical to
it whenever ``top_p = 1`` and ``top_k = -1``, as in the recipe).

Those log-probs come from one teacher-forced pass over each finished sequence, the computation
the trainer makes, not from the decoding steps: decoding through the KV cache reorders the
arithmetic, and in fp32 on a CPU its log-probs drift from a full pass by up to 4e-5 (measured on
SmolLM2-135M, 24 tokens). The pass costs one prefill per sequence.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from cuda_agent.recipe.hf_rollout.sampling import SamplingRequest

logger = logging.getLogger(__name__)


SCORE_CHUNK = 1024
"""Response positions whose fp32 log-softmax is computed at once in the scoring pass (the model's
logits of the whole response, in its dtype, are held once: response length x vocabulary)."""


class WeightSyncError(RuntimeError):
    """A weight sync that would leave the server with a mix of old and new (or wrong) weights."""


@dataclass
class Completion:
    """One request's answer: the sampled tokens (EOS kept), their log-probs, whether it was cut short."""

    token_ids: list[int]
    log_probs: list[float] | None
    aborted: bool = False


def tensor_digest(tensor: torch.Tensor, dtype: torch.dtype) -> str:
    """A short hash of a tensor's values in ``dtype``: the same on the actor and on the server
    after a sync (both sides cast to the engine's dtype first)."""
    data = tensor.detach().to("cpu", dtype=dtype).contiguous()
    return hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


class HFEngine:
    """A causal LM on one device, generating for a batch of prompts that share a sampling rule."""

    def __init__(self, model: torch.nn.Module, *, eos_token_ids: set[int], pad_token_id: int, seed: int = 0):
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.eos_token_ids = frozenset(eos_token_ids)
        self.pad_token_id = pad_token_id
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self._home = self.device  # where the weights live while awake
        self.asleep = False
        # tied parameters (embeddings and lm_head) are one tensor reached by several names
        self._targets: dict[str, torch.Tensor] = dict(model.named_parameters(remove_duplicate=False))
        self._targets.update(model.named_buffers(remove_duplicate=False))
        self._canonical: dict[str, str] = {}
        first_name: dict[int, str] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            self._canonical[name] = first_name.setdefault(id(param), name)
        self._written: dict[str, str] | None = None  # canonical -> the name that wrote it, during a sync

    # ----------------------------------------------------------------------------------- decoding

    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        requests: list[SamplingRequest],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> list[Completion]:
        """Decode every prompt until its EOS or its ``max_tokens``; ``should_stop`` is polled once a
        token and cuts every row short (abort): the rows are then marked ``aborted``."""
        if self.asleep:
            raise RuntimeError("the hf rollout engine is asleep (its weights are offloaded): wake_up first")
        if self._written is not None:
            raise RuntimeError("the hf rollout engine is in the middle of a weight sync: finish it first")
        if not prompts:
            return []
        rule = requests[0]
        if any(r.batch_key() != rule.batch_key() for r in requests):
            raise ValueError("one batch must share temperature, top_p, top_k and ignore_eos")
        batch, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((batch, width), dtype=torch.long, device=self.device)
        for row, prompt in enumerate(prompts):  # left padding: every row's next token is at the end
            ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long, device=self.device)
            mask[row, width - len(prompt):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1)
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        next_position = positions[:, -1:] + 1

        tokens: list[list[int]] = [[] for _ in prompts]
        done = [False] * batch
        aborted = False
        for _ in range(max(r.max_tokens for r in requests)):
            token = self._select(logits, rule)
            for row, t in enumerate(token.tolist()):
                if done[row]:
                    continue
                tokens[row].append(t)
                stop = t in self.eos_token_ids and not rule.ignore_eos
                done[row] = stop or len(tokens[row]) >= requests[row].max_tokens
            if all(done):
                break
            if should_stop():
                aborted = True
                break
            mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
            out = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=next_position,
                             past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_position = next_position + 1
        completions = []
        for prompt, t, r, d in zip(prompts, tokens, requests, done, strict=True):
            scored = self._score(prompt, t, 1.0 if r.greedy else r.temperature) if r.want_log_probs else None
            completions.append(Completion(token_ids=t, log_probs=scored, aborted=aborted and not d))
        return completions

    def _score(self, prompt: list[int], response: list[int], temperature: float) -> list[float]:
        """log_softmax(logits / T) of each response token, from one pass over the whole sequence."""
        if not response:
            return []
        ids = torch.tensor([prompt + response], dtype=torch.long, device=self.device)
        logits = self.model(input_ids=ids, logits_to_keep=len(response) + 1).logits[0, :-1]
        targets = torch.tensor(response, dtype=torch.long, device=self.device)
        scored: list[float] = []
        for start in range(0, len(response), SCORE_CHUNK):  # fp32 copies of a chunk of rows at a time
            rows = slice(start, start + SCORE_CHUNK)
            log_probs = torch.log_softmax(logits[rows].float() / temperature, dim=-1)
            scored += log_probs.gather(-1, targets[rows, None]).squeeze(-1).tolist()
        return scored

    def _select(self, logits: torch.Tensor, rule: SamplingRequest) -> torch.Tensor:
        """The next token of every row."""
        if rule.greedy:
            return logits.argmax(dim=-1)
        scaled = logits.float() / rule.temperature
        if rule.top_k > 0:
            scaled = TopKLogitsWarper(top_k=rule.top_k)(None, scaled)
        if rule.top_p < 1.0:
            scaled = TopPLogitsWarper(top_p=rule.top_p)(None, scaled)
        probs = torch.softmax(scaled, dim=-1)
        return torch.multinomial(probs, num_samples=1, generator=self._generator).squeeze(-1)

    # ------------------------------------------------------------------------------ sleep / wake

    def offload(self) -> None:
        """Free the device memory the weights hold (a no-op move on a CPU engine)."""
        if self._home.type != "cpu":
            self.model.to("cpu")
            torch.cuda.empty_cache()
        self.asleep = True

    def onload(self) -> None:
        if self._home.type != "cpu":
            self.model.to(self._home)
        self.asleep = False

    # ------------------------------------------------------------------------------- weight sync

    def begin_weight_sync(self) -> None:
        """Start a sync; one left unfinished (its sender died) is started over."""
        if self._written is not None:
            logger.warning("hf rollout: a weight sync was left unfinished (%d tensors); starting over",
                           len(self._written))
        self._written = {}

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copy tensors into the model by their Hugging Face names; returns the bytes written."""
        if self._written is None:
            raise WeightSyncError("load_weights outside a weight sync: call begin_weight_sync first")
        written = 0
        for name, tensor in named_tensors:
            target = self._targets.get(name)
            if target is None:
                raise WeightSyncError(
                    f"the rollout model has no parameter {name!r} (is the actor the same architecture? "
                    f"e.g. {sorted(self._canonical)[:3]})"
                )
            if tuple(tensor.shape) != tuple(target.shape):
                raise WeightSyncError(f"{name}: shape {tuple(tensor.shape)} != the rollout model's {tuple(target.shape)}")
            canonical = self._canonical.get(name, name)
            if canonical in self._written and self._written[canonical] == name:
                raise WeightSyncError(f"{name} was sent twice in one weight sync")
            if canonical in self._written:  # the second name of a tied parameter: the same tensor
                continue
            self._written[canonical] = name
            with torch.no_grad():
                target.data.copy_(tensor)
            written += tensor.numel() * target.element_size()
        return written

    def finish_weight_sync(self) -> int:
        """End a sync; every parameter must have been written exactly once. Returns how many were."""
        written, self._written = self._written, None
        if written is None:
            raise WeightSyncError("finish_weight_sync without begin_weight_sync")
        missing = sorted(set(self._canonical.values()) - set(written))
        if missing:
            raise WeightSyncError(
                f"weight sync left {len(missing)} parameters unwritten (e.g. {missing[:3]}): the rollout would "
                "mix old and new weights"
            )
        return len(written)

    def digests(self, names: Iterable[str]) -> dict[str, str]:
        """``tensor_digest`` of the named parameters, as the server holds them."""
        return {name: tensor_digest(self._targets[name], self.dtype) for name in names}

    @property
    def parameter_names(self) -> list[str]:
        """One name per distinct parameter (tied ones once)."""
        return sorted(set(self._canonical.values()))


def build_engine(model_config, *, dtype: str, load_format: str, device: str | torch.device, seed: int) -> HFEngine:
    """The engine for veRL's ``HFModelConfig``: random weights for ``load_format: dummy`` (veRL's
    default; the first weight sync overwrites them, as it does vLLM's), else the checkpoint."""
    from transformers import AutoModelForCausalLM
    from verl.utils.torch_dtypes import PrecisionType

    torch_dtype = PrecisionType.to_dtype(dtype)
    # sdpa: runs on any device and handles left padding; flash-attn is optional on the actor side too
    options = {"dtype": torch_dtype, "attn_implementation": "sdpa"}
    if load_format == "dummy":
        model = AutoModelForCausalLM.from_config(model_config.hf_config, **options)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_config.local_path, config=model_config.hf_config, **options)
    model.to(device)
    eos = model_config.generation_config.eos_token_id if model_config.generation_config is not None else None
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    tokenizer = model_config.tokenizer
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        eos_ids.add(tokenizer.eos_token_id)
    if not eos_ids:
        raise ValueError(f"{model_config.path}: neither its generation_config nor its tokenizer names an EOS token")
    pad = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None else min(eos_ids)
    return HFEngine(model, eos_token_ids=eos_ids, pad_token_id=pad, seed=seed)

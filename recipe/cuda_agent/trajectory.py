"""Token-level state of one multi-turn trajectory and the budget that bounds it.

The runtime token stream is prompt + response; the response interleaves model tokens (mask 1)
and observation tokens (mask 0). veRL puts the trajectory's reward on the last response token
and GAE ignores rewards on masked tokens, so a trajectory must end on a model token: an
observation that would leave no room for another generation is not appended (the trajectory
stops on the assistant turn that asked for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIN_GENERATION_TOKENS = 1
"""Room an appended observation must leave for the next generation."""


@dataclass
class TokenTrajectory:
    """Prompt and response tokens with their loss mask and (optional) rollout log-probs."""

    prompt_ids: list[int]
    response_limit: int
    token_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    weight_steps: tuple[int | None, int | None] | None = None
    """(first, last) version of the policy weights that generated it: the server's ``global_steps``."""

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.prompt_ids)

    @property
    def response_length(self) -> int:
        return len(self.response_mask)

    @property
    def remaining(self) -> int:
        """Tokens the next generation may use."""
        return self.response_limit - self.response_length

    def fits_observation(self, new_response_length: int) -> bool:
        """Whether a merged observation leaves room for another generation."""
        return self.response_limit - new_response_length >= MIN_GENERATION_TOKENS

    def update(self, token_ids: list[int], response_mask: list[int], logprobs: list[float] | None) -> None:
        """Adopt the result of a Continuous Token merge."""
        self.token_ids = list(token_ids)
        self.response_mask = list(response_mask)
        if logprobs is not None:
            self.logprobs = list(logprobs)

    def note_generation(self, extra_fields: dict) -> None:
        """Record which weights produced a turn (veRL's LLMServerClient sets min/max_global_steps)."""
        first = extra_fields.get("min_global_steps", extra_fields.get("global_steps"))
        last = extra_fields.get("max_global_steps", extra_fields.get("global_steps"))
        self.weight_steps = (first if self.weight_steps is None else self.weight_steps[0], last)

    @property
    def response_ids(self) -> list[int]:
        return self.token_ids[len(self.token_ids) - self.response_length :] if self.response_mask else []


def response_limit(prompt_tokens: int, rollout_response_length: int, max_total_tokens: int) -> int:
    """Response budget: veRL's response_length, and the total-length limit minus the prompt."""
    return min(rollout_response_length, max_total_tokens - prompt_tokens)


def truncate_middle(text: str, max_chars: int) -> str:
    """Cut a long observation in the middle, saying how much was dropped."""
    if len(text) <= max_chars:
        return text
    keep = max_chars // 2
    dropped = len(text) - 2 * keep
    return f"{text[:keep]}\n... [{dropped} characters truncated] ...\n{text[-keep:]}"

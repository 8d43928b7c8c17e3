"""The initial prompt's tokens, refused when over the rollout's prompt length instead of cut.

veRL 0.9.1's ``AgentLoopBase.ct_build_initial_tokens`` left-truncates a text prompt longer than
``rollout.prompt_length`` with only a log warning: the head of the system prompt (SKILL.md) would
silently disappear. Our loops build their prompts here, which raises a ``ConfigError`` instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cuda_agent.errors import ConfigError


async def initial_prompt_ids(loop: Any, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> list[int]:
    """``loop.ct_build_initial_tokens(messages, tools=tools)``, or ConfigError if veRL had to cut it."""
    limit = loop.rollout_config.prompt_length
    prompt_ids = await loop.ct_build_initial_tokens(messages, tools=tools)
    if len(prompt_ids) < limit:
        return prompt_ids
    full = await asyncio.to_thread(full_prompt_length, loop.tokenizer, messages, tools)
    if full > limit:
        raise ConfigError(
            f"the prompt (SKILL.md + task + tool schemas) is {full} tokens, over rollout.prompt_length={limit} "
            "(data.max_prompt_length); veRL would cut its start silently. Raise data.max_prompt_length "
            "(and rollout.prompt_length) or shorten SKILL.md / the task"
        )
    return prompt_ids


def full_prompt_length(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict] | None) -> int:
    """Tokens of the whole rendered prompt, generation header included."""
    from verl.utils.tokenizer.tokenizer import normalize_token_ids

    ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    return len(normalize_token_ids(ids))

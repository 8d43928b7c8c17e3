"""The one stand-in of the recipe tests: an LLM server that answers with scripted replies.

It implements what veRL's ``LLMServerClient`` offers agent loops — ``async generate(request_id,
*, prompt_ids, sampling_params, ...) -> TokenOutput`` — so the real ``AgentLoopWorker`` drives the
real agent loops with it. Each trajectory follows the script whose key appears in its prompt;
replies are text, tokenized with the real tokenizer, ended by EOS, and cut at ``max_tokens``
as vLLM would.
"""

from __future__ import annotations

import asyncio
from verl.workers.rollout.replica import TokenOutput


class ServerFailure(RuntimeError):
    """Raised by a script step to simulate the LLM server failing mid-trajectory."""


class Script:
    """Replies of one trajectory; the last reply repeats once the list is exhausted.

    A reply that is an exception is raised instead (the server failing mid-trajectory).
    """

    def __init__(self, replies: list[str | BaseException]):
        self.replies = replies


class ScriptedServer:
    """Not a dataclass on purpose: hydra.utils.instantiate turns dataclass arguments into configs."""

    def __init__(self, tokenizer, scripts: dict[str, Script]):
        self.tokenizer = tokenizer
        self.scripts = scripts
        self.requests: list[dict] = []
        self._by_request: dict[str, tuple[str, int]] = {}

    def key_of(self, prompt_ids: list[int]) -> str:
        text = self.tokenizer.decode(prompt_ids)
        keys = [key for key in self.scripts if key in text]
        assert len(keys) == 1, f"prompt matches scripts {keys}"
        return keys[0]

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        await asyncio.sleep(0)
        key, turn = self._by_request.get(request_id) or (self.key_of(prompt_ids), 0)
        self._by_request[request_id] = (key, turn + 1)
        self.requests.append(
            {"key": key, "turn": turn, "prompt_ids": list(prompt_ids), "params": dict(sampling_params)}
        )
        replies = self.scripts[key].replies
        reply = replies[min(turn, len(replies) - 1)]
        if isinstance(reply, BaseException):
            # a real server fails after some work; failing within milliseconds of a tool call also
            # races the local sandbox's kill of a just-started job (reported to the terminal owner)
            await asyncio.sleep(0.5)
            raise reply
        token_ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        token_ids = token_ids[: int(sampling_params.get("max_tokens", len(token_ids)))]
        return TokenOutput(
            token_ids=token_ids, log_probs=[-0.25] * len(token_ids), stop_reason="completed", num_preempted=0
        )

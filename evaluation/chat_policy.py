"""Turns generated as chat messages over HTTP: the runner's ``turns.Policy``.

The conversation is kept in the OpenAI chat format (assistant ``tool_calls`` with ids and
arguments as JSON text, one ``tool`` message per call, refused ones included), which is also the
trajectory record's format. Tool calls are checked against our raw schemas with the same
``validate_call`` the token-level parser path uses, so a defective call reads the same to the
model in training and in evaluation. The context budget (``max_total_tokens``) is tracked with
the endpoint's ``usage`` counts.
"""

from __future__ import annotations

import json
from typing import Any

from cuda_agent.evaluation.client import ChatClient
from cuda_agent.recipe.tool_calls import ParsedCall, validate_call
from cuda_agent.recipe.turns import GeneratedTurn

CHARS_PER_TOKEN = 3
"""Conservative estimate of an observation's size before the endpoint has counted it."""


class ChatPolicy:
    """Generates assistant turns with a ``ChatClient``."""

    def __init__(self, client: ChatClient, schemas: list[dict[str, Any]] | None, max_total_tokens: int):
        self.client = client
        self.schemas = schemas or None
        self.raw_schemas = {schema["function"]["name"]: schema for schema in schemas or []}
        self.max_total_tokens = max_total_tokens
        self.prompt_tokens: int | None = None
        """Prompt tokens of the first request."""
        self.context_tokens = 0
        """Prompt + completion tokens of the latest request: the context in use."""
        self.completion_tokens = 0
        self.retries = 0
        self.requests = 0

    async def generate(self, messages: list[dict[str, Any]]) -> GeneratedTurn:
        completion = await self.client.complete([_wire(message) for message in messages], self.schemas)
        self.requests += 1
        self.retries += completion.retries
        if completion.prompt_tokens is not None:
            if self.prompt_tokens is None:
                self.prompt_tokens = completion.prompt_tokens
            self.context_tokens = completion.prompt_tokens + (completion.completion_tokens or 0)
        self.completion_tokens += completion.completion_tokens or 0
        content = completion.message.get("content") or ""
        calls: list[ParsedCall] = []
        wire_calls: list[dict[str, Any]] = []
        for index, raw in enumerate(completion.message.get("tool_calls") or []):
            function = raw.get("function") or {}
            name = str(function.get("name") or "")
            arguments = function.get("arguments")
            text = json.dumps(arguments) if isinstance(arguments, dict) else (arguments if isinstance(arguments, str) else "")
            call_id = str(raw.get("id") or f"call_{self.requests}_{index}")
            calls.append(validate_call(name, text, call_id, self.raw_schemas))
            wire_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": text}})
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if wire_calls:
            message["tool_calls"] = wire_calls
        exhausted = self.context_tokens >= self.max_total_tokens
        return GeneratedTurn(message, calls, exhausted=exhausted)

    async def observe(self, messages: list[dict[str, Any]], tool_messages: list[dict[str, Any]]) -> bool:
        """Whether the observations leave room for another generation (estimated until counted)."""
        added = sum(len(message.get("content") or "") for message in tool_messages) // CHARS_PER_TOKEN
        return self.context_tokens + added < self.max_total_tokens

    @property
    def response_tokens(self) -> int | None:
        """Tokens after the prompt in the latest context (completions and observations)."""
        if self.prompt_tokens is None:
            return None
        return max(0, self.context_tokens - self.prompt_tokens)


def _wire(message: dict[str, Any]) -> dict[str, Any]:
    """A message as chat APIs accept it (tool results carry no ``name``)."""
    if message.get("role") == "tool":
        return {key: value for key, value in message.items() if key != "name"}
    return message

"""LLM composer: an OpenAI-compatible endpoint (vLLM, SGLang, a hosted API) stacks 2-5 torch seeds.

Plain HTTP (urllib, no SDK): ``POST {base_url}/chat/completions``. A reply that holds no
```python block, does not parse, is not KernelBench format or imports anything but torch is
skipped and counted by reason (`parse_reply`; the model's mistake); an
endpoint that cannot be reached raises InfraError, a 4xx reply ConfigError (bad model name or
key) - both after `retries` attempts.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.data_gen.ids import content_id
from cuda_agent.data_gen.loader import check_source
from cuda_agent.data_gen.models import Device, Provenance, Task, TaskKind
from cuda_agent.data_gen.prompts import composer_messages
from cuda_agent.data_gen.similarity import normalized_hash
from cuda_agent.errors import ConfigError, InfraError, ProblemError

logger = logging.getLogger(__name__)

_CODE_BLOCK = re.compile(r"```(?:python|py)?[^\n]*\n(.*?)```", re.DOTALL)


class EndpointConfig(BaseModel):
    """An OpenAI-compatible chat-completions endpoint."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="URL up to /v1, e.g. http://127.0.0.1:8000/v1.")
    model: str = Field(description="Model name the server serves.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key (may be unset).")
    temperature: float = Field(0.7, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int = Field(4096, ge=64, description="Completion token limit.")
    timeout_s: float = Field(180.0, gt=0, description="Limit of one request.")
    retries: int = Field(2, ge=0, description="Extra attempts after a connection error or a 5xx reply.")
    concurrency: int = Field(4, ge=1, description="Requests in flight.")


class ChatClient:
    """Minimal client of ``/chat/completions``."""

    def __init__(self, endpoint: EndpointConfig) -> None:
        self.endpoint = endpoint
        self.url = endpoint.base_url.rstrip("/") + "/chat/completions"

    def _request(self, messages: Sequence[dict[str, Any]]) -> urllib.request.Request:
        body = {"model": self.endpoint.model, "messages": list(messages), "temperature": self.endpoint.temperature,
                "max_tokens": self.endpoint.max_tokens}
        headers = {"Content-Type": "application/json"}
        if key := os.environ.get(self.endpoint.api_key_env):
            headers["Authorization"] = f"Bearer {key}"
        return urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")

    def complete(self, messages: Sequence[dict[str, Any]]) -> str:
        """The first choice's message content."""
        last: Exception | None = None
        for attempt in range(self.endpoint.retries + 1):
            try:
                with urllib.request.urlopen(self._request(messages), timeout=self.endpoint.timeout_s) as response:
                    payload = json.loads(response.read())
                return str(payload["choices"][0]["message"]["content"] or "")
            except urllib.error.HTTPError as exc:
                if 400 <= exc.code < 500:
                    raise ConfigError(f"{self.url} refused the request ({exc.code}): check --model and the API key "
                                      f"in ${self.endpoint.api_key_env}") from exc
                last = exc
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = exc
            except (KeyError, IndexError, TypeError, json.JSONDecodeError) as exc:
                raise InfraError(f"{self.url} did not answer in the chat-completions format: {exc}") from exc
            if attempt < self.endpoint.retries:
                time.sleep(min(2.0**attempt, 10.0))
        raise InfraError(f"no answer from {self.url} after {self.endpoint.retries + 1} attempts: {last}") from last


def extract_code(text: str) -> str | None:
    """The longest fenced code block of a reply (or the whole reply if it parses as a model file)."""
    blocks = _CODE_BLOCK.findall(text)
    if blocks:
        return max(blocks, key=len).strip() + "\n"
    return text.strip() + "\n" if "class Model" in text else None


ALLOWED_IMPORTS = ("torch", "math")
"""Top-level modules a composed task may import (the prompt allows torch, torch.nn, torch.nn.functional)."""


def invalid_reason(code: str) -> str | None:
    """Why `code` is not a usable task (a reason name), or None when it is."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "syntax_error"
    try:
        check_source(code)
    except ProblemError:
        return "not_kernelbench_format"
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(name.split(".", 1)[0] not in ALLOWED_IMPORTS for name in names):
            return "disallowed_import"
    return None


def parse_reply(reply: str) -> tuple[str | None, str | None]:
    """(code, None) for a usable reply, else (None, reason): no_code_block, syntax_error, ..."""
    code = extract_code(reply)
    if code is None:
        return None, "no_code_block"
    reason = invalid_reason(code)
    return (None, reason) if reason else (code, None)


def _attempt(client: ChatClient, seeds: Sequence[Task], *, device: Device, window_ms: tuple[float, float],
             rng_seed: int, model_name: str) -> Task | str:
    names = [s.name for s in seeds]
    reply = client.complete(composer_messages([(s.name, s.source) for s in seeds], device=device, window_ms=window_ms))
    code, reason = parse_reply(reply)
    if code is None:
        logger.info("LLM reply for %s rejected: %s", names, reason)
        return reason or "invalid"
    key = normalized_hash(code)
    return Task(
        id=content_id("llm", key), name="_".join(names)[:120], source=code, ops=[s.ops[0] for s in seeds],
        kind=TaskKind.FUSED, level=2,
        provenance=Provenance(generator="compose-llm", library="torch", llm_model=model_name, rng_seed=rng_seed,
                              parents=[s.id for s in seeds]),
    )


def compose_with_llm(seeds: Sequence[Task], endpoint: EndpointConfig, *, seed: int, device: Device,
                     window_ms: tuple[float, float], min_ops: int = 2, max_ops: int = 5,
                     start: int = 0) -> Iterator[Task | str]:
    """An endless stream of attempts (a str names why the reply was unusable).

    Attempt `i` samples its seeds with rng ``f"{seed}:{i}"``.
    """
    pool = [s for s in seeds if s.provenance.library == "torch"]
    if len(pool) < min_ops:
        raise ConfigError(f"the LLM composer needs at least {min_ops} torch seeds, got {len(pool)}: run crawl first")
    client = ChatClient(endpoint)

    def one(index: int) -> Task | str:
        rng = random.Random(f"{seed}:{index}")
        chosen = rng.sample(pool, rng.randint(min_ops, min(max_ops, len(pool))))
        return _attempt(client, chosen, device=device, window_ms=window_ms, rng_seed=seed, model_name=endpoint.model)

    with ThreadPoolExecutor(max_workers=endpoint.concurrency) as executor:
        index = start
        while True:
            wave = list(range(index, index + endpoint.concurrency))
            index += endpoint.concurrency
            yield from executor.map(one, wave)

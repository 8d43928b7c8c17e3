"""A chat-completions client for any OpenAI-compatible endpoint (vLLM, SGLang, hosted APIs).

Plain HTTP (httpx), streaming off. Transient failures — connection errors, timeouts, HTTP 429
and 5xx — are retried with exponential backoff and counted; what is still failing after the
retries raises ``EndpointError``, which the runner records as an ``endpoint_error`` sample
(excluded from metrics, retried on resume), never as the model's failure.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import ConfigError, CudaAgentError


class EndpointError(CudaAgentError, RuntimeError):
    """The model endpoint failed (after retries); not the model's outcome."""


class EndpointConfig(BaseModel):
    """Where and how to reach the model."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1.")
    model: str = Field(description="Model name as the endpoint serves it.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key (may be unset).")
    timeout_s: float = Field(600.0, gt=0, description="Limit of one request.")
    retries: int = Field(4, ge=0, description="Retries of a transient failure.")
    backoff_s: float = Field(2.0, ge=0, description="First retry delay; doubled each retry (with jitter).")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature (None: the endpoint's default).")
    max_tokens: int | None = Field(None, ge=1, description="Completion tokens per request (None: the endpoint's).")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/")


class Completion(BaseModel):
    """The parts of a chat completion the runner uses."""

    model_config = ConfigDict(extra="forbid")

    message: dict[str, Any] = Field(description="The choice's message: content and tool_calls.")
    finish_reason: str | None = Field(None, description="stop, tool_calls, length, ...")
    prompt_tokens: int | None = Field(None, description="usage.prompt_tokens.")
    completion_tokens: int | None = Field(None, description="usage.completion_tokens.")
    retries: int = Field(0, description="Transient failures retried for this completion.")


def _transient(status: int) -> bool:
    return status == 429 or status >= 500


class ChatClient:
    """One HTTP connection pool to the endpoint; use as an async context manager."""

    def __init__(self, config: EndpointConfig):
        import httpx

        self.config = config
        key = os.environ.get(config.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(config.timeout_s, connect=min(30.0, config.timeout_s)),
                                       headers=headers)
        self.retried = 0

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def check(self) -> list[str]:
        """Fail fast, with a one-line ConfigError, on an unreachable or unauthorized endpoint or a model it does
        not serve; return warnings. A model list that fails (an error status, or not the OpenAI shape: some
        servers' list is broken, some have none) is a warning, and the endpoint is then checked with the smallest
        real request, a one-token chat completion."""
        import httpx

        url = f"{self.config.url}/models"
        try:
            response = await self._http.get(url, timeout=min(30.0, self.config.timeout_s))
        except httpx.HTTPError as exc:
            raise ConfigError(f"--base-url {self.config.base_url}: endpoint unreachable ({type(exc).__name__}: "
                              f"{exc}); start the server or fix the URL (it ends in /v1)") from None
        self._refuse_unauthorized(response.status_code)
        served = _served_models(response)
        if served:
            if self.config.model not in served:
                raise ConfigError(f"--model {self.config.model!r} is not served at {self.config.base_url}; "
                                  f"served: {', '.join(served[:10])}")
            return []
        what = f"HTTP {response.status_code}" if response.status_code != 200 else "no model list in OpenAI's shape"
        warning = (f"GET {url} answered {what}; checked {self.config.model!r} with a one-token chat completion "
                   f"instead")
        await self._probe()
        return [warning]

    async def _probe(self) -> None:
        """The smallest real request: one token of a chat completion; a ConfigError names why it failed."""
        body = {"model": self.config.model, "messages": [{"role": "user", "content": "Say OK."}],
                "max_tokens": 1, "stream": False}
        url = f"{self.config.url}/chat/completions"
        try:
            response, _ = await self._post(url, body)
        except EndpointError as exc:
            raise ConfigError(f"--base-url {self.config.base_url}: a one-token chat completion failed: {exc}") from None
        self._refuse_unauthorized(response.status_code)
        if response.status_code != 200:
            raise ConfigError(f"--model {self.config.model!r} at {self.config.base_url}: a one-token chat completion "
                              f"answered HTTP {response.status_code}: {' '.join(response.text[:200].split())}")
        try:
            _parse(response, url, 0)
        except EndpointError as exc:
            raise ConfigError(f"--base-url {self.config.base_url}: {exc}") from None

    def _refuse_unauthorized(self, status: int) -> None:
        if status in (401, 403):
            raise ConfigError(f"--base-url {self.config.base_url}: HTTP {status} (unauthorized); put "
                              f"the API key in ${self.config.api_key_env} or name its variable with --api-key-env")

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Completion:
        """One chat completion (retried on transient failures)."""
        body: dict[str, Any] = {"model": self.config.model, "messages": messages, "stream": False}
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        url = f"{self.config.url}/chat/completions"
        response, retries = await self._post(url, body)
        if response.status_code != 200:
            raise EndpointError(f"{url}: HTTP {response.status_code}: {' '.join(response.text[:300].split())}")
        return _parse(response, url, retries)

    async def _post(self, url: str, body: dict[str, Any]) -> tuple[Any, int]:
        """POST `body`, retrying transient failures: the first response that is not one, and the retries it
        took; EndpointError when they never stop."""
        import httpx

        attempt = 0
        while True:
            try:
                response = await self._http.post(url, json=body)
                if not _transient(response.status_code):
                    return response, attempt
                reason = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.TimeoutException as exc:
                reason = f"timed out after {self.config.timeout_s:g} s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            if attempt >= self.config.retries:
                raise EndpointError(f"{url}: {reason} (after {attempt} retries)")
            delay = self.config.backoff_s * (2**attempt) * (1 + 0.25 * random.random())
            attempt += 1
            self.retried += 1
            await asyncio.sleep(delay)


def _served_models(response: Any) -> list[str]:
    """The model ids of a ``GET /models`` answer in OpenAI's shape; [] for anything else."""
    if response.status_code != 200:
        return []
    try:
        data = response.json().get("data")
        return [str(item["id"]) for item in data] if isinstance(data, list) else []
    except (ValueError, AttributeError, KeyError, TypeError):
        return []


def _parse(response: Any, url: str, retries: int) -> Completion:
    try:
        payload = response.json()
        choice = payload["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise EndpointError(f"{url}: not a chat completion: {' '.join(response.text[:200].split())}") from None
    usage = payload.get("usage") or {}
    return Completion(message=dict(message), finish_reason=choice.get("finish_reason"),
                      prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                      retries=retries)


async def check_endpoint(config: EndpointConfig) -> list[str]:
    """``ChatClient.check`` on a client of its own (the CLI's preflight): its warnings."""
    async with ChatClient(config) as client:
        return await client.check()


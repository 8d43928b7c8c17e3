"""The runner's preflight (``ChatClient.check``) against endpoints whose model list fails.

Real HTTP to the scripted endpoint (tests/evaluation/openai_scripted.py). A list that answers an error or
not OpenAI's shape is a warning, and a one-token chat completion decides; unreachable, unauthorized and a
model the server does not serve stay one-line errors. The same against a real server, `transformers
serve`, whose model list answers HTTP 500: tests/evaluation/test_transformers_serve.py.
"""

from __future__ import annotations

import asyncio

import pytest

from cuda_agent.errors import ConfigError
from cuda_agent.evaluation.client import EndpointConfig, check_endpoint

from openai_scripted import ScriptedOpenAI

MODEL = "scripted-model"
BROKEN_LISTS = {
    "http_500": (500, {"detail": "Internal Server Error"}),
    "http_404": (404, {"error": "no model list here"}),
    "not_openai_shape": (200, {"models": [MODEL]}),
    "empty_list": (200, {"object": "list", "data": []}),
    "not_json": (200, "<html>hello</html>"),
}


def _check(base_url: str, model: str = MODEL, **options) -> list[str]:
    config = EndpointConfig(base_url=base_url, model=model, retries=0, backoff_s=0.0, **options)
    return asyncio.run(check_endpoint(config))


@pytest.mark.parametrize("case", sorted(BROKEN_LISTS))
def test_a_broken_model_list_warns_and_a_one_token_completion_decides(case):
    with ScriptedOpenAI({"default": [{"content": "OK"}]}, model=MODEL, models_answer=BROKEN_LISTS[case]) as server:
        warnings = _check(server.base_url)
        probes = list(server.bodies)
    assert len(warnings) == 1 and "one-token chat completion" in warnings[0], warnings
    assert "/models answered" in warnings[0]
    assert [body["max_tokens"] for body in probes] == [1]  # the smallest real request, once


def test_a_good_model_list_needs_no_completion():
    with ScriptedOpenAI({"default": [{"content": "OK"}]}, model=MODEL) as server:
        assert _check(server.base_url) == []
        assert server.bodies == []


@pytest.mark.parametrize("listed", [True, False])
def test_a_model_not_served_is_one_line_error(listed):
    """By the list when it works; by the completion's 404 when the list is broken."""
    answer = None if listed else BROKEN_LISTS["http_500"]
    with ScriptedOpenAI({"default": [{"content": "OK"}]}, model=MODEL, models_answer=answer) as server:
        with pytest.raises(ConfigError) as raised:
            _check(server.base_url, model="nope")
    message = str(raised.value)
    assert "'nope'" in message and "\n" not in message
    assert ("is not served" in message) if listed else ("HTTP 404" in message and "does not exist" in message)


@pytest.mark.parametrize("status", [401, 403])
def test_unauthorized_stays_an_error_when_the_list_is_broken(status):
    with ScriptedOpenAI({"default": [{"status": status}]}, model=MODEL,
                        models_answer=BROKEN_LISTS["http_500"]) as server:
        with pytest.raises(ConfigError, match="unauthorized"):
            _check(server.base_url)


def test_a_server_error_on_the_completion_too_is_an_error_naming_it():
    with ScriptedOpenAI({"default": [{"status": 503}]}, model=MODEL, models_answer=BROKEN_LISTS["http_500"]) as server:
        with pytest.raises(ConfigError, match="one-token chat completion failed: .*HTTP 503"):
            _check(server.base_url)


def test_unreachable_stays_an_error():
    with pytest.raises(ConfigError, match="unreachable"):
        _check("http://127.0.0.1:9/v1")


def test_the_cli_prints_the_warning_and_runs(tmp_path):
    """`cuda-agent run` against a server whose list answers HTTP 500: a warning line, then the run."""
    from test_runner import cli, problems, read_lines

    folder = problems(tmp_path / "problems", ["one"])
    out = tmp_path / "r.jsonl"
    with ScriptedOpenAI({"default": [{"content": "no code, sorry"}]}, model=MODEL,
                        models_answer=BROKEN_LISTS["http_500"]) as server:
        done = cli("run", "--problems", str(folder), "--base-url", server.base_url, "--model", MODEL,
                   "--mode", "single-turn", "--device", "cpu", "--out", str(out), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "warning: GET " in done.stderr and "answered HTTP 500" in done.stderr
    assert done.stderr.count("one-token chat completion") == 1  # checked once, not again by the runner
    assert list(read_lines(out)) == ["one"]

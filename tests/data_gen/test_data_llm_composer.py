"""The LLM composer against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cuda_agent.data_gen.compose import EndpointConfig, compose
from cuda_agent.data_gen.compose.llm import ChatClient, extract_code
from cuda_agent.data_gen.crawl import run_seed_once
from cuda_agent.data_gen.models import Task, TaskKind
from cuda_agent.data_gen.store import JsonlStore
from cuda_agent.errors import ConfigError, InfraError

FUSED = '''Here is the fused model.

```python
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.nn.functional.gelu(x)
        return torch.sum(x, dim=1)


in_features = {n}
out_features = 16


def get_inputs():
    return [torch.randn(8, in_features)]


def get_init_inputs():
    return [in_features, out_features]
```
'''
OTHER = FUSED.replace("torch.nn.functional.gelu(x)", "torch.sigmoid(x)").replace("torch.sum", "torch.amax")


class ScriptedServer:
    """Answers /v1/chat/completions with the next scripted reply (or an HTTP status)."""

    def __init__(self, replies: list[str | int]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                reply = server.replies.pop(0) if server.replies else "no code here"
                if isinstance(reply, int):
                    self.send_response(reply)
                    self.end_headers()
                    return
                payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer([])
    yield s
    s.close()


def _endpoint(url: str, **kw) -> EndpointConfig:
    return EndpointConfig(base_url=url, model="scripted-model", concurrency=1, retries=0, timeout_s=10, **kw)


def test_llm_composer_writes_valid_distinct_tasks(tmp_path, server, seeds_path, monkeypatch):
    monkeypatch.setenv("SCRIPTED_KEY", "secret")
    # a good task, garbage, a renamed duplicate of the first (only constants differ), another good task
    server.replies = [FUSED.replace("{n}", "32"), "sorry, I cannot", FUSED.replace("{n}", "64"), OTHER.replace("{n}", "8")]
    out = tmp_path / "llm.jsonl"
    report = compose(out, count=2, composer="llm", seeds_path=seeds_path, seed=3,
                     endpoint=_endpoint(server.url, api_key_env="SCRIPTED_KEY"), device="cpu", window_ms=(0.1, 50))
    tasks = JsonlStore(out, Task).load()
    assert (report.written, report.failed_attempts, report.duplicates) == (2, 1, 1)
    assert len(server.requests) == 4
    request = server.requests[0]
    assert request["model"] == "scripted-model"
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert server.headers[0]["Authorization"] == "Bearer secret"
    for task in tasks:
        assert task.kind is TaskKind.FUSED and task.provenance.generator == "compose-llm"
        assert task.provenance.llm_model == "scripted-model"
        assert 2 <= len(task.ops) <= 5 and all(op.startswith("torch") for op in task.ops)
        run_seed_once(task.source)


def test_sampled_operators_appear_in_the_prompt(server, seeds_path):
    server.replies = [FUSED.replace("{n}", "32")]
    compose_path = seeds_path.parent / "prompt_check.jsonl"
    compose(compose_path, count=1, composer="llm", seeds_path=seeds_path, seed=5, endpoint=_endpoint(server.url),
            device="cuda", window_ms=(1.0, 100.0))
    task = JsonlStore(compose_path, Task).load()[0]
    prompt = server.requests[0]["messages"][1]["content"]
    seeds = {s.id: s for s in JsonlStore(seeds_path, Task).load()}
    for parent in task.provenance.parents:
        assert seeds[parent].name in prompt
    assert "between 1 and 100 ms" in prompt


def test_client_errors_are_typed(server):
    server.replies = [401]
    with pytest.raises(ConfigError):
        ChatClient(_endpoint(server.url)).complete([{"role": "user", "content": "hi"}])
    server.replies = [503]
    with pytest.raises(InfraError):
        ChatClient(_endpoint(server.url)).complete([{"role": "user", "content": "hi"}])
    with pytest.raises(InfraError):
        ChatClient(_endpoint("http://127.0.0.1:9/v1")).complete([{"role": "user", "content": "hi"}])


def test_extract_code_takes_the_longest_block():
    assert extract_code("```python\nshort\n```\ntext\n```python\nlonger block\n```") == "longer block\n"
    assert extract_code("no code") is None


def test_invalid_generations_are_counted_by_reason(tmp_path, server, seeds_path):
    not_format = "```python\nimport torch\n\ndef forward(x):\n    return x\n```"
    bad_import = "```python\n" + FUSED.split("```python\n")[1].split("```")[0].replace(
        "import torch\n", "import torch\nimport os\n", 1) + "```"
    server.replies = ["sorry, no code", "```python\ndef broken(:\n```", not_format, bad_import,
                      FUSED.replace("{n}", "32"), FUSED.replace("{n}", "48")]
    report = compose(tmp_path / "llm.jsonl", count=1, composer="llm", seeds_path=seeds_path, seed=1,
                     endpoint=_endpoint(server.url), device="cpu", window_ms=(0.1, 50))
    assert report.written == 1
    assert report.failed_by_reason == {"no_code_block": 1, "syntax_error": 1, "not_kernelbench_format": 1,
                                       "disallowed_import": 1}
    assert report.failed_attempts == 4


def test_parse_reply_takes_fenced_python_in_any_spelling():
    from cuda_agent.data_gen.compose.llm import parse_reply

    body = FUSED.split("```python\n")[1].split("```")[0].replace("{n}", "8")
    for fence in ("```python\n", "```py\n", "```\n", "```python model.py\n"):
        code, reason = parse_reply(f"Sure.\n{fence}{body}```\nDone.")
        assert reason is None and code is not None and "class Model" in code, fence
    assert parse_reply(body) == (body.strip() + "\n", None)  # a bare file is taken as is
    assert parse_reply("no code at all") == (None, "no_code_block")


def test_the_prompt_asks_for_the_format_and_the_rules():
    from cuda_agent.data_gen.prompts import composer_messages

    messages = composer_messages([("Conv2d", "class Model: ..."), ("GELU", "class Model: ...")], device="cuda",
                                 window_ms=(1.0, 100.0))
    system, user = messages[0]["content"], messages[1]["content"]
    assert "KernelBench" in system and "```python" in system
    assert "Conv2d -> GELU" in user and "get_inputs()" in user and "get_init_inputs()" in user
    assert "deterministic" in user and "between 1 and 100 ms" in user and "H100" in user


def test_compose_command_against_the_scripted_endpoint(tmp_path, server, seeds_path):
    from typer.testing import CliRunner

    from cuda_agent.data_gen.cli import app

    server.replies = ["nothing here", FUSED.replace("{n}", "32")]
    out = tmp_path / "cli.jsonl"
    result = CliRunner().invoke(app, ["compose", "--composer", "llm", "--base-url", server.url, "--model",
                                      "scripted-model", "--concurrency", "1", "--count", "1", "--seeds",
                                      str(seeds_path), "--out", str(out), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "no_code_block" in result.output
    assert [t.provenance.llm_model for t in JsonlStore(out, Task).load()] == ["scripted-model"]
    assert server.requests[0]["model"] == "scripted-model"
    assert "one CPU core" in server.requests[0]["messages"][1]["content"]

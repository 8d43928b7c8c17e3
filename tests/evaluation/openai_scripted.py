"""The one stand-in of the runner tests: an OpenAI-compatible chat server replaying fixed conversations.

Real HTTP on 127.0.0.1 (``http.server`` in a thread), ``GET /v1/models`` and
``POST /v1/chat/completions`` with tool calls, streaming off. Each conversation follows the
script whose key is the task id named in the request's messages ("Task id: <key>"), or the
script "default"; the turn is the number of assistant messages already in the request, so the
server is stateless and a resumed run replays the same answers. A reply is a dict: ``content``,
``tool_calls`` ([name, arguments-as-text-or-dict]), or ``status`` (an HTTP error code) or
``sleep`` (seconds before answering: an endpoint that times out). ``models_answer`` replaces the
model list's answer, ``(status, payload)``, as servers with a broken or missing list give.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_KEY = re.compile(r"Task id: (\S+)")


def call(name: str, arguments: Any) -> tuple[str, Any]:
    return (name, arguments)


class ScriptedOpenAI:
    """Start with ``with ScriptedOpenAI(scripts, model="m") as server: server.base_url``."""

    def __init__(self, scripts: dict[str, list[dict[str, Any]]], model: str = "scripted-model",
                 models_answer: tuple[int, Any] | None = None):
        self.scripts = scripts
        self.model = model
        self.models_answer = models_answer
        self.requests: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def key_of(self, messages: list[dict[str, Any]]) -> str:
        for message in messages:
            match = _KEY.search(str(message.get("content") or ""))
            if match and match.group(1) in self.scripts:
                return match.group(1)
        return "default"

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        if body.get("model") != self.model:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}, 0.0
        messages = body["messages"]
        key = self.key_of(messages)
        turn = sum(1 for message in messages if message.get("role") == "assistant")
        with self._lock:
            self.requests[key] += 1
            self.bodies.append(body)
        script = self.scripts[key]
        step = script[min(turn, len(script) - 1)]
        if "status" in step:
            return int(step["status"]), {"error": {"message": "scripted failure"}}, step.get("sleep", 0.0)
        message: dict[str, Any] = {"role": "assistant", "content": step.get("content", "")}
        calls = step.get("tool_calls") or []
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{turn}_{i}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args) in enumerate(calls)
            ]
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 10
        completion_tokens = len(json.dumps(message)) // 4
        payload = {
            "id": f"cmpl-{turn}", "object": "chat.completion", "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
        return 200, payload, step.get("sleep", 0.0)

    def _handler(self):  # noqa: ANN202
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/") == "/v1/models" and server.models_answer is not None:
                    self._send(*server.models_answer)
                elif self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": "not found"}})
                    return
                status, payload, sleep = server.reply(body)
                if sleep:
                    time.sleep(sleep)
                self._send(status, payload)

        return Handler

"""Every route of ``cuda-agent serve-reward``: a real server on 127.0.0.1, a real local pool on the CPU.

The server runs as the command a user starts (a subprocess), with a token and small limits so
that 401, 413 and 503 can be provoked. OpenRLHF's remote-reward client is emulated as its
``SingleTurnAgentExecutor`` (OpenRLHF 0.11.0, openrlhf/utils/agent.py) calls it: aiohttp,
``json=`` payload, no headers, the answer's ``rewards`` / ``scores`` / ``extra_logs`` turned
into tensors the way openrlhf/trainer/ppo_utils/samples_generator.py does.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "examples" / "data" / "single_turn.parquet"
TASK_ID = "examples/diag_matmul"
SOLUTIONS = REPO / "examples" / "solutions" / "diag_matmul"
TOKEN = "contract-test-token"
PROMPT = "<|im_start|>user\nWrite it. Example:\n```python model_new.py\n...\n```<|im_end|>\n<|im_start|>assistant\n"


def _files(name: str) -> dict[str, str]:
    root = SOLUTIONS / name
    return {p.relative_to(root).as_posix(): p.read_text() for p in [root / "model_new.py",
                                                                    *sorted((root / "kernels").iterdir())]}


def _answer(name: str) -> str:
    blocks = [f"```{'python' if path.endswith('.py') else 'cpp'} {path}\n{text}```" for path, text in
              _files(name).items()]
    return "Here is my kernel.\n" + "\n".join(blocks) + "<|im_end|>"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    env = {**os.environ, "CUDA_AGENT_REWARD_TOKEN": TOKEN}
    env.pop("CUDA_AGENT_POOL", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "cuda_agent.cli.main", "serve-reward", "--device", "cpu", "--port", "0",
         "--tasks", str(TASKS), "--max-batch", "4", "--max-in-flight", "4", "--max-body-mb", "0.25",
         "--retry-after", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(process.stderr), daemon=True).start()
    url = process.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        process.kill()
        pytest.fail(f"serve-reward did not start: {url!r}\n{''.join(log)}")
    yield url
    process.terminate()
    assert process.wait(timeout=60) == 0, "".join(log)


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_health_needs_no_token_and_names_the_pool(server: str) -> None:
    answer = httpx.get(f"{server}/health")
    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "ok" and body["device"] == "cpu" and body["tasks"] == 1
    assert body["pool"]["backend"] == "local" and body["pool"]["workers"] == 1


@pytest.mark.parametrize("route", ["/metrics", "/get_reward", "/v1/evaluate"])
def test_other_routes_need_the_token(server: str, route: str) -> None:
    method = httpx.get if route == "/metrics" else httpx.post
    kwargs = {} if route == "/metrics" else {"json": {}}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = method(f"{server}{route}", headers=headers, **kwargs)
        assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Bearer"
        assert answer.json()["error"] == "unauthorized" and answer.json()["request_id"]


def test_metrics_in_prometheus_and_json(server: str) -> None:
    text = httpx.get(f"{server}/metrics", headers=_auth())
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain")
    assert 'cuda_agent_service_requests_total{route="/health",code="200"}' in text.text
    as_json = httpx.get(f"{server}/metrics?format=json", headers=_auth()).json()
    assert as_json["requests_total"] >= 1 and as_json["pool"]["backend"] == "local"


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        (b"{not json", 400, ["not JSON"]),
        (json.dumps({"query": ["x"]}).encode(), 400, ["labels"]),
        (json.dumps({"query": ["x", "y"], "labels": [TASK_ID]}).encode(), 400, ["1 entries for 2 queries"]),
        (json.dumps({"query": ["x"], "labels": ["no/such/task"]}).encode(), 400, ["labels[0]", "no/such/task"]),
        (json.dumps({"query": [], "labels": []}).encode(), 400, ["empty"]),
        (json.dumps({"query": ["x"] * 5, "labels": [TASK_ID] * 5}).encode(), 413, ["limit of 4"]),
        (json.dumps({"query": ["x" * 300_000], "labels": [TASK_ID]}).encode(), 413, ["bytes"]),
    ],
    ids=["not-json", "no-labels", "length-mismatch", "unknown-task", "empty", "batch-too-large", "body-too-large"],
)
def test_get_reward_refuses_bad_requests_with_a_message(server: str, body: bytes, code: int, words: list[str]) -> None:
    answer = httpx.post(f"{server}/get_reward", content=body,
                        headers={**_auth(), "Content-Type": "application/json", "X-Request-ID": "bad-1"})
    assert answer.status_code == code, answer.text
    error = answer.json()
    assert error["request_id"] == "bad-1" == answer.headers["X-Request-ID"]
    assert "\n" not in error["message"] and all(word in error["message"] for word in words), error


def test_unknown_route_and_method(server: str) -> None:
    assert httpx.get(f"{server}/nope", headers=_auth()).status_code == 404
    answer = httpx.get(f"{server}/get_reward", headers=_auth())
    assert answer.status_code == 405 and "POST /get_reward" in answer.json()["message"]


def test_get_reward_without_code_is_minus_one_without_evaluating(server: str) -> None:
    payload = {"query": [PROMPT + "I cannot do it.<|im_end|>"], "prompts": [PROMPT],
               "labels": [{"style": "rule", "ground_truth": TASK_ID}]}
    answer = httpx.post(f"{server}/get_reward", json=payload, headers=_auth())
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["rewards"] == body["scores"] == [-1.0]
    assert body["extra_logs"]["prompt_found"] == [1.0] and body["extra_logs"]["answer_files"] == [0.0]
    assert body["infos"][0]["status"] == "static_check_failed" and body["infos"][0]["task_id"] == TASK_ID


def _verify_only(name: str) -> dict:
    problem = (REPO / "examples" / "problems" / "diag_matmul.py").read_text()
    return {"problem_src": problem, "files": _files(name), "task_id": name,
            "options": {"profile": False, "correctness_trials": 1}}


def test_evaluate_one_job_returns_the_result_with_its_receipt(server: str) -> None:
    answer = httpx.post(f"{server}/v1/evaluate", json=_verify_only("cpu_fast"), headers=_auth(), timeout=600)
    assert answer.status_code == 200, answer.text
    (result,) = answer.json()["results"]
    assert result["status"] == "ok" and result["correct"] is True and result["device"] == "cpu"
    receipt = result["receipt"]
    assert receipt["device_name"] and receipt["torch_version"] and len(receipt["candidate_sha256"]) == 64
    assert result["stages"]["verify"]["ok"] is True


def test_evaluate_batch_and_device_mismatch(server: str) -> None:
    jobs = [_verify_only("cpu_fast"), _verify_only("cpu_cheat")]
    answer = httpx.post(f"{server}/v1/evaluate", json={"jobs": jobs}, headers=_auth(), timeout=600)
    assert answer.status_code == 200, answer.text
    fast, cheat = answer.json()["results"]
    assert fast["status"] == "ok" and cheat["status"] != "ok" and cheat["status"] != "infra_error"
    wrong = httpx.post(f"{server}/v1/evaluate", json={"jobs": [{**jobs[0], "device": "cuda"}]}, headers=_auth())
    assert wrong.status_code == 400 and "evaluates on 'cpu'" in wrong.json()["message"]
    bad = httpx.post(f"{server}/v1/evaluate", json={"jobs": [{"files": {}}]}, headers=_auth())
    assert bad.status_code == 400 and "problem_src" in bad.json()["message"]


def test_over_the_in_flight_limit_is_503_with_retry_after(server: str) -> None:
    """4 evaluations in flight at most: a second batch of 3 while the first runs is refused whole."""
    jobs = {"jobs": [_verify_only("cpu_fast")] * 3}

    async def both() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(headers=_auth(), timeout=600) as client:
            first = asyncio.create_task(client.post(f"{server}/v1/evaluate", json=jobs))
            for _ in range(100):  # until the first batch is admitted
                await asyncio.sleep(0.05)
                if (await client.get(f"{server}/health")).json()["evaluations_in_flight"] >= 3:
                    break
            second = await client.post(f"{server}/v1/evaluate", json=jobs)
            return await first, second

    first, second = asyncio.run(both())
    assert first.status_code == 200 and [r["status"] for r in first.json()["results"]] == ["ok"] * 3
    assert second.status_code == 503 and second.headers["Retry-After"] == "2"
    assert second.json()["error"] == "overloaded"


@pytest.mark.slow
def test_openrlhf_client_gets_the_kernel_reward(server: str) -> None:
    """As OpenRLHF calls it: aiohttp, json payload, no headers (the token in the URL); one query."""
    aiohttp = pytest.importorskip("aiohttp")
    torch = pytest.importorskip("torch")

    async def post() -> dict:
        payload = {"query": [PROMPT + _answer("cpu_fast")], "prompts": [PROMPT], "labels": [TASK_ID]}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
            async with session.post(f"{server}/get_reward?token={TOKEN}", json=payload) as response:
                response.raise_for_status()
                return await response.json()

    started = time.monotonic()
    rewards_info = asyncio.run(post())
    # what OpenRLHF does with the answer (agent.py, samples_generator.py)
    reward, scores = rewards_info.get("rewards"), rewards_info.get("scores")
    tensors = {key: torch.tensor([value]) for key, value in (rewards_info.get("extra_logs") or {}).items()}
    assert torch.tensor([reward]).shape == (1, 1) and scores == reward
    assert tensors["correct"].item() == 1.0 and tensors["infra_failure"].item() == 0.0
    info = rewards_info["infos"][0]
    assert info["status"] == "ok" and reward[0] in (1.0, 2.0, 3.0), info  # how much faster depends on the load
    assert info["receipt_device_name"] and info["receipt_isolation"] and info["receipt_candidate_sha256"]
    assert 0 < info["eval_wall_s"] <= time.monotonic() - started

"""The reward service on a GPU: a real server, an embedded pool on the GPU, the CUDA example kernels.

Skipped without a GPU or without the service extra (fastapi, uvicorn, httpx).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "examples" / "solutions" / "diag_matmul"


def _files(name: str) -> dict[str, str]:
    root = SOLUTIONS / name
    return {p.relative_to(root).as_posix(): p.read_text()
            for p in [root / "model_new.py", *sorted((root / "kernels").iterdir())]}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_AGENT_POOL", "CUDA_AGENT_REWARD_TOKEN")}
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "cuda_agent.cli.main", "serve-reward", "--device", "cuda", "--port", "0",
         "--tasks", str(REPO / "examples" / "data" / "single_turn.parquet")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(process.stderr), daemon=True).start()
    url = process.stdout.readline().strip()
    if not url.startswith("http"):
        process.kill()
        pytest.fail("serve-reward did not start:\n" + "".join(log))
    yield url
    process.terminate()
    process.wait(timeout=120)
    print("".join(log[-20:]))


def test_evaluate_cuda_kernels_with_a_gpu_receipt(server: str) -> None:
    problem = (REPO / "examples" / "problems" / "diag_matmul_cuda.py").read_text()
    jobs = [{"problem_src": problem, "files": _files(name), "task_id": name, "options": {"timed_calls": 10}}
            for name in ("cuda_fast", "cuda_cheat")]
    answer = httpx.post(f"{server}/v1/evaluate", json={"jobs": jobs}, timeout=1200)
    assert answer.status_code == 200, answer.text
    fast, cheat = answer.json()["results"]
    print("cuda_fast:", fast["status"], fast["reward"], fast["wall_s"], fast["receipt"])
    print("cuda_cheat:", cheat["status"], cheat["reward"], cheat["error"])
    assert fast["status"] == "ok" and fast["reward"] >= 2 and fast["device"] == "cuda"
    assert fast["receipt"]["driver"] not in ("", "n/a") and fast["receipt"]["device_name"]
    assert cheat["reward"] == -1 and cheat["status"] not in ("ok", "infra_error")


def test_get_reward_scores_a_cuda_answer(server: str) -> None:
    answer_text = "\n".join(f"```{'python' if p.endswith('.py') else 'cuda'} {p}\n{t}```"
                            for p, t in _files("cuda_fast").items())
    answer = httpx.post(f"{server}/get_reward", timeout=1200,
                        json={"query": ["PROMPT" + answer_text], "prompts": ["PROMPT"],
                              "labels": ["examples/diag_matmul"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    info = body["infos"][0]
    print("get_reward:", body["rewards"], info["status"], info["eval_wall_s"], info["receipt_device_name"])
    assert info["status"] == "ok" and body["rewards"][0] >= 1 and info["receipt_driver"] not in ("", "n/a")

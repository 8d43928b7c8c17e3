"""``cuda-agent run`` end to end on CPU through a scripted OpenAI-compatible endpoint.

Real pieces: HTTP, the CLI under its error contract, the task loaders, the shared turn loop
(cuda_agent.recipe.turns), the tools in the local terminal sandbox, the embedded CPU evaluator,
the results JSONL and the trajectory records. The only stand-in is the model (openai_scripted).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openai_scripted import ScriptedOpenAI, call

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "examples" / "problems" / "diag_matmul.py"
FAST = REPO / "examples" / "solutions" / "diag_matmul" / "cpu_fast"
MODEL = "scripted-model"

pytestmark = [pytest.mark.slow, pytest.mark.verl]


def cli(*args: str, timeout: float = 1500, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuda_agent.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


def read_lines(path: Path) -> dict[str, dict]:
    return {json.loads(line)["task_id"]: json.loads(line) for line in path.read_text().splitlines() if line.strip()}


def problems(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(PROBLEM, folder / f"{name}.py")
    return folder


def solve_script() -> list[dict]:
    kernel = (FAST / "kernels" / "diag_matmul.cpp").read_text()
    model_new = (FAST / "model_new.py").read_text()
    return [
        {"content": "Let me read the task.", "tool_calls": [call("Read", {"file_path": "model.py"})]},
        {"content": "Writing the kernel.", "tool_calls": [call("Write", {"file_path": "kernels/diag_matmul.cpp",
                                                                         "content": kernel})]},
        {"content": "Now the model.", "tool_calls": [call("Write", {"file_path": "model_new.py", "content": model_new}),
                                                     call("Bash", {"command": "bash utils/compile.sh"})]},
        {"content": "Done: compiled; the row scaling is O(NM)."},
    ]


SCRIPTS = {
    "solve": solve_script(),
    "malformed": [
        {"content": "Trying.", "tool_calls": [call("Write", '{"file_path": "model_new.py", '),
                                               call("Compile", {"target": "all"})]},
        {"content": "I give up."},
    ],
    "fail500": [{"status": 500}],
    "slow": [{"content": "late", "sleep": 30.0}],  # far past --request-timeout, even on a loaded machine
}


@pytest.fixture(scope="module")
def agentic_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    folder = problems(root / "problems", list(SCRIPTS))
    out = root / "results.jsonl"
    args = ["run", "--problems", str(folder), "--device", "cpu", "--base-url", "", "--model", MODEL, "--out", str(out),
            "--concurrency", "4", "--request-timeout", "2", "--retries", "2", "--backoff", "0.05",
            "--workspace-root", str(root)]
    with ScriptedOpenAI(SCRIPTS, model=MODEL) as server:
        args[args.index("--base-url") + 1] = server.base_url
        first = cli(*args)
        requests_first = dict(server.requests)
        lines_first = read_lines(out)
        second = cli(*args)
        requests_second = {key: server.requests[key] - requests_first.get(key, 0) for key in server.requests}
    return {"first": first, "second": second, "out": out, "records": root / "results.trajectories",
            "lines_first": lines_first,
            "requests_first": requests_first, "requests_second": requests_second}


def test_task_solved_in_several_turns(agentic_run):
    assert agentic_run["first"].returncode == 0, agentic_run["first"].stderr[-2000:]
    line = read_lines(agentic_run["out"])["solve"]
    assert line["status"] == "ok" and line["correct"] is True and line["reward"] >= 1
    assert line["turns"] == 4 and line["stop_reason"] == "model_done"
    assert line["speedup_vs_eager"] > 0 and line["eager_us"] > 0 and line["runtime_us"] > 0  # CPU times under load: noise
    assert line["model"] == MODEL and line["mode"] == "agentic" and line["tokens"] > 0
    assert line["evaluation"]["stages"]["compile"]["ok"] is True and line["evaluation"]["receipt"]["device_name"]
    assert isinstance(line["evaluation"]["warnings"], list)  # where a lowered reward or a load is said


def test_trajectory_records_are_written(agentic_run):
    from cuda_agent.recipe.records import read_records

    records = {record.task_id: record for record in read_records([agentic_run["records"]])}
    solve = records["solve"]
    assert solve.messages[0]["role"] == "system" and "Task id: solve" in solve.messages[0]["content"]
    assert [m["role"] for m in solve.messages].count("assistant") == 4
    tool_ids = [m["tool_call_id"] for m in solve.messages if m["role"] == "tool"]
    call_ids = [c["id"] for m in solve.messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert tool_ids == call_ids and len(call_ids) == 4
    assert solve.status == "ok" and not solve.infra_failure and solve.model == MODEL
    assert {tool["function"]["name"] for tool in solve.tools} >= {"Bash", "Write", "Read"}


def test_malformed_calls_become_observations(agentic_run):
    from cuda_agent.recipe.records import read_records

    line = read_lines(agentic_run["out"])["malformed"]
    assert line["status"] != "ok" and line["correct"] is False and line["reward"] == -1  # the untouched template
    assert line["turns"] == 2
    record = next(r for r in read_records([agentic_run["records"]]) if r.task_id == "malformed")
    observations = [m["content"] for m in record.messages if m["role"] == "tool"]
    assert "not valid JSON" in observations[0] and "Unknown tool 'Compile'" in observations[1]
    assert record.flags.malformed_calls == 1 and record.flags.unknown_tool_calls == 1


def test_endpoint_errors_are_recorded_not_scored(agentic_run):
    lines = agentic_run["lines_first"]
    for key, reason in (("fail500", "HTTP 500"), ("slow", "timed out")):
        line = lines[key]
        assert line["status"] == "endpoint_error" and line["reward"] is None and not line["correct"]
        assert reason in line["error"] and "after 2 retries" in line["error"]
    assert agentic_run["requests_first"]["fail500"] == 3  # first try + 2 retries


def test_rerun_skips_finished_pairs_and_retries_endpoint_errors(agentic_run):
    assert agentic_run["second"].returncode == 0, agentic_run["second"].stderr[-2000:]
    again = agentic_run["requests_second"]
    excluded = {"endpoint_error", "infra_error"}  # (an overloaded machine can fail an evaluation: infra_error)
    for key, line in agentic_run["lines_first"].items():
        assert (again.get(key, 0) > 0) == (line["status"] in excluded), (key, line["status"], again)
    assert again["fail500"] == 3
    raw = [json.loads(line) for line in agentic_run["out"].read_text().splitlines()]
    first_ok = agentic_run["lines_first"]["solve"]["status"] not in ("endpoint_error", "infra_error")
    assert [line["task_id"] for line in raw].count("solve") == (1 if first_ok else 2)
    assert [line["task_id"] for line in raw].count("fail500") == 2


def test_single_turn_mode_and_report(tmp_path):
    answer = ("Here it is.\n```cpp kernels/diag_matmul.cpp\n" + (FAST / "kernels" / "diag_matmul.cpp").read_text()
              + "```\n```python model_new.py\n" + (FAST / "model_new.py").read_text() + "```\n")
    folder = problems(tmp_path / "problems", ["one"])
    out = tmp_path / "single.jsonl"
    with ScriptedOpenAI({"default": [{"content": answer}]}, model=MODEL) as server:
        done = cli("run", "--problems", str(folder), "--device", "cpu", "--base-url", server.base_url, "--model", MODEL,
                   "--mode", "single-turn", "--out", str(out), "--json", "--workspace-root", str(tmp_path))
        assert "tools" not in server.bodies[0]
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["passed"] == 1
    line = read_lines(out)["one"]
    assert line["status"] == "ok" and line["mode"] == "single-turn" and line["turns"] == 1
    shown = cli("report", str(out), "--out", str(tmp_path / "report"), "--json")
    assert shown.returncode == 0, shown.stderr
    levels = json.loads(shown.stdout)["runs"][0]["levels"]
    assert levels[-1]["pass_rate"] == 1.0


def test_rescore_solutions_on_kernelbench_layout(tmp_path):
    checkout = tmp_path / "KernelBench-checkout"
    level1 = checkout / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    shutil.copy(PROBLEM, level1 / "12_Matmul_with_diagonal_matrices_.py")
    shutil.copy(PROBLEM, level1 / "2_Other.py")
    (level1 / "notes.txt").write_text("not a problem")
    solutions = tmp_path / "solutions"
    shutil.copytree(FAST, solutions / "level1" / "12_Matmul_with_diagonal_matrices_")
    out = tmp_path / "rescore.jsonl"
    done = cli("run", "--kernelbench", str(checkout), "--level", "1", "--device", "cpu", "--solutions", str(solutions),
               "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = read_lines(out)
    assert list(lines) == ["level1/2_Other", "level1/12_Matmul_with_diagonal_matrices_"]  # KernelBench order
    assert lines["level1/12_Matmul_with_diagonal_matrices_"]["status"] == "ok"
    assert lines["level1/12_Matmul_with_diagonal_matrices_"]["level"] == 1
    missing = lines["level1/2_Other"]
    assert missing["status"] == "static_check_failed" and "no solution folder" in missing["error"]
    assert lines["level1/12_Matmul_with_diagonal_matrices_"]["model"] is None


def test_interrupted_run_keeps_finished_samples(tmp_path):
    folder = problems(tmp_path / "problems", ["quick", "hang"])
    out = tmp_path / "results.jsonl"
    scripts = {"quick": [{"content": "Nothing to do."}], "hang": [{"content": "late", "sleep": 120}]}
    with ScriptedOpenAI(scripts, model=MODEL) as server:
        args = [sys.executable, "-m", "cuda_agent.cli.main", "run", "--problems", str(folder), "--device", "cpu",
                "--base-url", server.base_url, "--model", MODEL, "--out", str(out), "--workspace-root", str(tmp_path)]
        process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (out.exists() and "quick" in out.read_text()):
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "Traceback" not in stderr
    lines = read_lines(out)
    assert list(lines) == ["quick"] and lines["quick"]["status"] not in ("ok", "endpoint_error", "infra_error")
    assert list((tmp_path).glob("cuda_agent_ws_*")) == []  # workspaces released on the way out


@pytest.mark.parametrize("case", ["unreachable", "wrong_model", "not_kernelbench", "no_source"])
def test_bad_input_is_one_line_exit_2(tmp_path, case):
    folder = problems(tmp_path / "problems", ["one"])
    with ScriptedOpenAI({"default": [{"content": "x"}]}, model=MODEL) as server:
        base = ["--device", "cpu", "--out", str(tmp_path / "r.jsonl")]
        if case == "unreachable":
            args = ["run", "--problems", str(folder), "--base-url", "http://127.0.0.1:9/v1", "--model", MODEL, *base]
        elif case == "wrong_model":
            args = ["run", "--problems", str(folder), "--base-url", server.base_url, "--model", "nope", *base]
        elif case == "not_kernelbench":
            args = ["run", "--kernelbench", str(folder), "--base-url", server.base_url, "--model", MODEL, *base]
        else:
            args = ["run", "--base-url", server.base_url, "--model", MODEL, *base]
        done = cli(*args, timeout=120)
    expected = {"unreachable": "unreachable", "wrong_model": "'nope' is not served",
                "not_kernelbench": "is not a KernelBench checkout", "no_source": "exactly one task source"}[case]
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "r.jsonl").exists() or (tmp_path / "r.jsonl").read_text() == ""

"""The GPU session's ``kernelbench`` phase, run on CPU: the scripted-endpoint runner script on a
KernelBench-shaped folder, ``cuda-agent baselines`` and the ranking comparison with published timings."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "examples" / "problems" / "diag_matmul.py"
FAST = REPO / "examples" / "solutions" / "diag_matmul" / "cpu_fast"
TASK = "12_Matmul_with_diagonal_matrices_"


def kernelbench_folder(root: Path) -> Path:
    level1 = root / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    shutil.copy(PROBLEM, level1 / f"{TASK}.py")
    return root


@pytest.mark.slow
@pytest.mark.verl
def test_kb_phase_script_on_cpu(tmp_path):
    checkout = kernelbench_folder(tmp_path / "kb")
    shutil.copytree(FAST, tmp_path / "solutions" / "level1" / TASK)
    done = subprocess.run([sys.executable, "benchmarks/runner/kb_phase.py", "--kernelbench", str(checkout),
                           "--solutions", str(tmp_path / "solutions"), "--device", "cpu", "--out", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "kb_phase.json").read_text())
    assert summary["results"][0]["task_id"] == f"level1/{TASK}" and summary["results"][0]["status"] == "ok"
    assert summary["results"][0]["turns"] == 5
    assert (tmp_path / "out" / "kb_report" / "report.html").stat().st_size > 0


def test_ranking_comparison_with_published_timings(tmp_path):
    ours = [{"task_id": f"level1/{i}_P", "level": 1, "device_name": "GPU", "eager_us": 10.0 * i,
             "torch_compile_us": 5.0 * i, "wall_s": 1.0} for i in range(1, 5)]
    (tmp_path / "ours.jsonl").write_text("".join(json.dumps(line) + "\n" for line in ours))
    timing = tmp_path / "timing"
    timing.mkdir()
    eager = {"level1": {f"{i}_P.py": {"mean": 0.02 * i, "hardware": "NVIDIA H100"} for i in range(1, 5)}}
    compiled = {"level1": {f"{i}_P.py": {"mean": 0.01 * (5 - i), "hardware": "NVIDIA H100"} for i in range(1, 5)}}
    (timing / "baseline_time_torch.json").write_text(json.dumps(eager))
    (timing / "baseline_time_torch_compile_inductor_default.json").write_text(json.dumps(compiled))
    done = subprocess.run([sys.executable, "benchmarks/runner/compare_baselines.py", str(tmp_path / "ours.jsonl"),
                           str(timing), "--out", str(tmp_path / "table.md")], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "table.md").read_text()
    assert "| level1 | eager | 4 | 1.000 | 0.50 |" in table  # same order; ours 10 us vs theirs 20 us
    assert "| level1 | compile | 4 | -1.000 |" in table
    assert "NVIDIA H100" in table


@pytest.mark.slow
def test_baselines_command_on_cpu(tmp_path):
    checkout = kernelbench_folder(tmp_path / "kb")
    out = tmp_path / "baselines.jsonl"
    args = [sys.executable, "-m", "cuda_agent.cli.main", "baselines", "--kernelbench", str(checkout), "--level", "1",
            "--device", "cpu", "--timed-calls", "3", "--out", str(out), "--json"]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["measured"] == 1
    line = json.loads(out.read_text())
    assert line["task_id"] == f"level1/{TASK}" and line["eager_us"] > 0 and line["device_name"]
    again = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert json.loads(again.stdout)["measured"] == 0  # resumable: the task is already in the file

"""The GPU session's ``kernelbench`` phase, run on CPU: the scripted-endpoint runner script on a
KernelBench-shaped folder, ``cuda-agent baselines`` and the ranking comparison with published timings."""

from __future__ import annotations

import json
import os
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
    assert "| timing | level1 | eager | 4 | 1.000 | 0.50 |" in table  # same order; ours 10 us vs theirs 20 us
    assert "| timing | level1 | compile | 4 | -1.000 |" in table
    # compile beats eager everywhere in ours; in theirs only where 0.01 * (5 - i) < 0.02 * i, i.e. i >= 2
    assert "| timing | level1 | compile vs eager | 4 | agree 3/4 | ours 4/0/0, theirs 3/0/1 |" in table
    assert "NVIDIA H100" in table


def test_ranking_comparison_counts_near_equal_times_as_ties(tmp_path):
    """torch.compile calling eager's own library kernel is a tie, not a win by a hundredth of a percent."""
    ours = [{"task_id": "level1/1_Matmul", "level": 1, "device_name": "GPU", "eager_us": 1000.0,
             "torch_compile_us": 999.5, "wall_s": 1.0},
            {"task_id": "level1/2_Relu", "level": 1, "device_name": "GPU", "eager_us": 100.0,
             "torch_compile_us": 90.0, "wall_s": 1.0}]
    (tmp_path / "ours.jsonl").write_text("".join(json.dumps(line) + "\n" for line in ours))
    timing = tmp_path / "timing"
    timing.mkdir()
    eager = {"level1": {"1_Matmul.py": {"mean": 1.0}, "2_Relu.py": {"mean": 0.1}}}
    compiled = {"level1": {"1_Matmul.py": {"mean": 1.01}, "2_Relu.py": {"mean": 0.103}}}
    (timing / "baseline_time_torch.json").write_text(json.dumps(eager))
    (timing / "baseline_time_torch_compile_inductor_default.json").write_text(json.dumps(compiled))
    args = [sys.executable, "benchmarks/runner/compare_baselines.py", str(tmp_path / "ours.jsonl"), str(timing)]
    done = subprocess.run([*args, "--out", str(tmp_path / "table.md")], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # ours: a 0.05 % "win" is a tie, a 10 % one is faster; theirs: +1 % a tie, +3 % slower
    assert "| timing | level1 | compile vs eager | 2 | agree 1/2 | ours 1/1/0, theirs 0/1/1 |" in (tmp_path / "table.md").read_text()
    done = subprocess.run([*args, "--out", str(tmp_path / "strict.md"), "--tie", "0"], cwd=REPO, capture_output=True, text=True)
    assert "| ours 2/0/0, theirs 0/0/2 |" in (tmp_path / "strict.md").read_text()
    done = subprocess.run([*args, "--out", str(tmp_path / "bad.md"), "--tie", "1.5"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and "--tie 1.5 must be a fraction" in done.stderr


@pytest.mark.parametrize("content", [None, "", "\n\n"])
def test_ranking_comparison_without_baselines_writes_an_empty_table(tmp_path, content):
    """The GPU phase's baseline pass measured nothing (its file missing or empty): a clear note, not a crash."""
    ours = tmp_path / "ours.jsonl"
    if content is not None:
        ours.write_text(content)
    done = subprocess.run([sys.executable, "benchmarks/runner/compare_baselines.py", str(ours), str(tmp_path / "none"),
                           "--out", str(tmp_path / "table.md")], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "No baselines were measured" in (tmp_path / "table.md").read_text()
    assert done.stderr.strip().splitlines() == [
        f"compare_baselines: no baselines measured ({ours} missing or empty); wrote {tmp_path / 'table.md'}"]


def test_ranking_comparison_names_a_broken_line(tmp_path):
    ours = tmp_path / "ours.jsonl"
    ours.write_text(json.dumps({"task_id": "level1/1_P", "eager_us": 1.0}) + "\n{not json\n")
    done = subprocess.run([sys.executable, "benchmarks/runner/compare_baselines.py", str(ours), str(tmp_path),
                           "--out", str(tmp_path / "table.md")], cwd=REPO, capture_output=True, text=True)
    assert done.returncode != 0
    assert done.stderr.strip() == f"compare_baselines: {ours}:2 is not a `cuda-agent baselines` line"


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


def _small_problems(root: Path) -> Path:
    """A KernelBench-shaped folder with two small problems (one level each), cheap to compile on CPU."""
    kernelbench_folder(root)
    level2 = root / "KernelBench" / "level2"
    level2.mkdir()
    (level2 / "1_Gemm_ReLU.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = nn.Linear(32, 16)\n\n    def forward(self, x):\n"
        "        return torch.relu(self.fc(x)) * 2.0\n\n\ndef get_inputs():\n    return [torch.randn(8, 32)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    return root


@pytest.mark.slow
def test_baselines_parallel_warm_up_budget_and_resume(tmp_path):
    """--jobs 2: both problems compiled ahead into the shared compile cache, then timed; a budget of 0
    stops before any device work and says what is left; baselines already in the cache cost nothing."""
    checkout = _small_problems(tmp_path / "kb")
    base = [sys.executable, "-m", "cuda_agent.cli.main", "baselines", "--kernelbench", str(checkout), "--level", "1,2",
            "--device", "cpu", "--timed-calls", "3", "--json"]

    def run(*extra: str, cache: str = "cache") -> tuple[dict, str]:
        env = {**os.environ, "CUDA_AGENT_CACHE": str(tmp_path / cache)}
        done = subprocess.run(base + list(extra), cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout), done.stderr

    stopped, err = run("--jobs", "2", "--budget", "0", "--out", str(tmp_path / "stopped.jsonl"))
    assert (stopped["measured"], stopped["remaining"], stopped["budget_spent"]) == (0, 2, True)
    assert "2 task(s) left" in err
    summary, _ = run("--jobs", "2", "--out", str(tmp_path / "a.jsonl"))
    assert (summary["measured"], summary["warmed"], summary["warm_failed"], summary["failed"]) == (2, 2, 0, 0)
    lines = [json.loads(text) for text in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert {line["task_id"] for line in lines} == {f"level1/{TASK}", "level2/1_Gemm_ReLU"}
    assert all(line["warmed"] and line["eager_us"] > 0 and line["torch_compile_us"] > 0 for line in lines)
    compile_cache = tmp_path / "cache" / "reference_compile"
    assert len(list((compile_cache / "warmed").iterdir())) == 2
    graphs = lambda cache: [p for p in (cache / "inductor" / "fxgraph").rglob("*") if p.is_file()]  # noqa: E731
    # without a warm-up the timed compile children write the shared cache themselves: one graph per problem ...
    serial, _ = run("--jobs", "1", "--out", str(tmp_path / "serial.jsonl"), cache="serial_cache")
    assert serial["warmed"] == 0 and len(graphs(tmp_path / "serial_cache" / "reference_compile")) == 2
    # ... so after warm-up + timing still one each: the timed children loaded the warm-up's (a miss adds its own)
    assert len(graphs(compile_cache)) == 2
    again, _ = run("--jobs", "2", "--budget", "0", "--out", str(tmp_path / "b.jsonl"))  # a fresh file, a warm cache
    assert (again["measured"], again["cached"], again["remaining"], again["budget_spent"]) == (2, 2, 0, False)


def test_a_warm_up_batch_leaves_half_the_budget_to_timing():
    """A budgeted pass whose warm-up batch would outlast the budget still times what it compiled."""
    from cuda_agent.evaluation.baselines import warm_deadline

    assert warm_deadline(100.0, None) is None
    assert warm_deadline(100.0, 300.0) == 200.0
    assert warm_deadline(100.0, 90.0) == 100.0  # budget already spent: no warm-up at all


def test_warm_up_autotuning_choices_are_forgotten(tmp_path):
    """Triton configurations chosen by warm-up children that shared the device are deleted; choices a
    timed (solo) child made before the warm-up and the compiled kernels stay."""
    import time

    from cuda_agent.evaluation.baselines import forget_autotuning

    folder = tmp_path / "inductor" / "ab"
    folder.mkdir(parents=True)
    solo, shared, kernel = folder / "k1.best_config", folder / "k2.best_config", folder / "k2.py"
    for path in (solo, shared, kernel):
        path.write_text("{}")
    os.utime(solo, (time.time() - 120, time.time() - 120))
    assert forget_autotuning(tmp_path, since=time.time() - 30) == 1
    assert solo.exists() and not shared.exists() and kernel.exists()


@pytest.mark.slow
def test_the_next_problems_children_are_spawned_while_this_ones_are_timed(tmp_path):
    """With spawn_ahead, problem k+1's children are spawned before problem k is timed (they only import
    until let go); a pass stopped by its budget kills the children spawned ahead and removes their folder."""
    import asyncio

    from cuda_agent.evaluation.baselines import _Item, _time_chunk
    from cuda_agent.evaluation.tasks import Task
    from cuda_agent.sandbox_pool.harness.baselines import BaselineChildren
    from cuda_agent.sandbox_pool.harness.problem import load_problem
    from cuda_agent.sandbox_pool.harness.runner import Zygote

    source = PROBLEM.read_text()
    items = [_Item(Task(task_id=f"p{i}", level=1, problem_src=source, device="cpu"), load_problem(source), f"k{i}")
             for i in range(3)]
    zygote, events, folders = Zygote(), [], []

    def start(item):
        events.append(("spawn", item.task.task_id))
        children = BaselineChildren(item.problem, zygote, device="cpu", device_index=0, tf32=False, n_sets=3,
                                    warmup=2, key=item.key, compile_cache_dir=str(tmp_path / "compile"))
        folders.append(Path(children.work))
        return children

    def on_timed(item, found, error, wall_s):
        events.append(("timed", item.task.task_id, error or (found.eager.median_us > 0 and found.torch_compile is not None)))

    def out_of_time():  # the budget runs out after two problems
        return sum(event[0] == "timed" for event in events) >= 2

    try:
        asyncio.run(_time_chunk(items, start, 600, out_of_time, on_timed, spawn_ahead=True))
    finally:
        zygote.close()
    assert events == [("spawn", "p0"), ("spawn", "p1"), ("timed", "p0", True), ("spawn", "p2"), ("timed", "p1", True)]
    assert len(folders) == 3 and not any(folder.exists() for folder in folders)

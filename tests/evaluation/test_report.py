"""``cuda-agent report`` on hand-made results files whose metrics are known, and the HTML page in a real browser."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def line(task_id: str, level: int | None, status: str = "ok", correct: bool = True, se: float | None = None,
         sc: float | None = None, sample: int = 0, **extra) -> dict:
    return {"task_id": task_id, "level": level, "sample": sample, "status": status, "correct": correct,
            "reward": None if status == "endpoint_error" else (2.0 if correct else -1.0),
            "speedup_vs_eager": se, "speedup_vs_compile": sc, "runtime_us": 10.0 if se else None,
            "eager_us": 10.0 * se if se else None, "torch_compile_us": 10.0 * sc if sc else None, "turns": 3,
            "model": "m", **extra}


RUN_A = [
    line("level1/t1", 1, se=2.0, sc=1.5),
    line("level1/t2", 1, se=0.5, sc=0.25),
    line("level1/t3", 1, status="incorrect", correct=False),
    line("level1/t4", 1, status="endpoint_error", correct=False, error="HTTP 500"),
    line("level1/t5", 1, se=4.0, sc=0.8),
    line("level2/u1", 2, se=1.2, sc=1.1),
    line("level2/u2", 2, status="compile_error", correct=False),
]
RUN_B = [  # two samples per task: pass@k
    line("x", 1, se=1.1, sc=0.9, sample=0), line("x", 1, status="incorrect", correct=False, sample=1),
    line("y", 1, se=3.0, sc=2.0, sample=0), line("y", 1, se=3.0, sc=2.0, sample=1),
    line("z", 1, status="timeout", correct=False, sample=0), line("z", 1, status="crash", correct=False, sample=1),
]


def write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in lines))
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuda_agent.cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def test_metrics_per_level_are_the_known_values(tmp_path):
    from cuda_agent.evaluation.metrics import run_metrics
    from cuda_agent.evaluation.results import read_results

    levels = {m.level: m for m in run_metrics(read_results(write(tmp_path / "a.jsonl", RUN_A)))}
    one = levels["1"]
    assert (one.samples, one.excluded, one.tasks) == (4, 1, 4)
    assert one.pass_rate == 0.75 and one.faster_than_eager == 0.5 and one.faster_than_compile == 0.25
    assert math.isclose(one.geomean_speedup_eager_correct, 4 ** (1 / 3))
    assert math.isclose(one.geomean_speedup_eager_all, 4 ** (1 / 4))
    assert math.isclose(one.geomean_speedup_compile_correct, 0.3 ** (1 / 3))
    assert one.fast_p == {"0": 0.75, "1": 0.5, "1.5": 0.5, "2": 0.25}
    two = levels["2"]
    assert two.pass_rate == 0.5 and math.isclose(two.geomean_speedup_eager_all, math.sqrt(1.2))
    everything = levels["all"]
    assert everything.samples == 6 and math.isclose(everything.pass_rate, 4 / 6) and everything.pass_at_k == {}


def test_pass_at_k_unbiased(tmp_path):
    from cuda_agent.evaluation.metrics import pass_at_k, run_metrics
    from cuda_agent.evaluation.results import read_results

    assert math.isclose(pass_at_k(10, 3, 5), 1 - math.comb(7, 5) / math.comb(10, 5))
    levels = run_metrics(read_results(write(tmp_path / "b.jsonl", RUN_B)))
    assert math.isclose(levels[0].pass_at_k["1"], 0.5) and math.isclose(levels[0].pass_at_k["2"], 2 / 3)


def test_report_cli_side_by_side(tmp_path):
    a, b = write(tmp_path / "a.jsonl", RUN_A), write(tmp_path / "b.jsonl", RUN_B)
    done = cli("report", str(a), str(b), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    markdown = done.stdout
    assert "| a | 1 | 4 | 4 | 1 | 75.0% | 50.0% | 25.0% | 1.59x / 1.41x |" in markdown
    assert "| b | 1 |" in markdown and "pass@2" in markdown
    for name in ("report.md", "report.json", "speedup.png", "fast_p.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert (tmp_path / "out" / "speedup.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [run["label"] for run in data["runs"]] == ["a", "b"]
    as_json = cli("report", str(a), "--out", str(tmp_path / "out2"), "--json")
    assert json.loads(as_json.stdout)["runs"][0]["levels"][0]["pass_rate"] == 0.75


def test_results_file_with_a_broken_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(RUN_A[0]) + "\n{\"task_id\": \"x\", trunc\n")
    done = cli("report", str(path), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert f"{path}:2: not a run result" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_resume_drops_a_line_cut_mid_write(tmp_path):
    from cuda_agent.evaluation.results import ResultsFile

    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(RUN_A[0]) + "\n" + json.dumps(RUN_A[1])[:30])
    assert ResultsFile(path).finished() == {("level1/t1", 0)}
    assert path.read_text().count("\n") == 1


def _records(folder: Path) -> None:
    from cuda_agent.recipe.records import RecordWriter, TrajectoryFlags, TrajectoryRecord, now_utc

    messages = [
        {"role": "system", "content": "SKILL"}, {"role": "user", "content": "Task level1/t1"},
        {"role": "assistant", "content": "Compiling.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "bash utils/compile.sh"}'}}]},
        {"role": "tool", "content": "COMPILE-OBSERVATION-OK", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Done."},
    ]
    with RecordWriter(folder) as writer:
        writer.write(TrajectoryRecord(messages=messages, tools=[], reward=2.0, status="ok", infra_failure=False,
                                      task_id="level1/t1", turns=2, flags=TrajectoryFlags(), created=now_utc()))


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_html_page_drill_down_opens_in_a_browser(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (scripts/setup.sh test installs Debian's chromium)")
    results = write(tmp_path / "a.jsonl", [
        {**RUN_A[0], "evaluation": {"stages": {"compile": {"ran": True, "ok": True, "duration_s": 1.5, "log": "BUILD-LOG"}},
                                    "receipt": {"device_name": "RECEIPT-GPU"}, "timings": {}}},
        *RUN_A[1:]])
    _records(tmp_path / "a.trajectories")
    done = cli("report", str(results), "--out", str(tmp_path / "out"), "--html")
    assert done.returncode == 0, done.stderr
    page = tmp_path / "out" / "report.html"
    text = page.read_text()
    assert "data:image/png;base64," in text and "<link" not in text and "src='http" not in text
    from cuda_agent.evaluation.html_page import anchor

    target = anchor("a", "level1/t1", 0)
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000",
                          "--dump-dom", f"file://{page}#{target}"], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-1000:]
    element = re.search(rf"<details id=\"{target}\"[^>]*>", dom.stdout)
    assert element is not None, dom.stdout[:500]
    assert "open" in element.group(0)
    height = re.search(r'data-shown-height="(\d+)"', element.group(0))
    assert height is not None and int(height.group(1)) > 100  # laid out and visible, not a collapsed box
    drill = dom.stdout[element.end():dom.stdout.index("</details>", element.end())]
    assert "COMPILE-OBSERVATION-OK" in drill and "BUILD-LOG" in drill and "RECEIPT-GPU" in drill
    other = re.search(rf"<details id=\"{anchor('a', 'level1/t2', 0)}\"[^>]*>", dom.stdout)
    assert other is not None and "open" not in other.group(0)


def _without(item: dict, *keys: str) -> dict:
    return {key: value for key, value in item.items() if key not in keys}


def test_lines_of_other_writers_count_by_their_status(tmp_path):
    """Another harness's lines: no `correct` field (derived from the status: only `ok` passes), JSON null
    for optional fields such as `error`. Before: `ok`, reward 3, no `correct` counted as a failure."""
    from cuda_agent.evaluation.metrics import run_metrics
    from cuda_agent.evaluation.results import read_results

    lines = [_without(line("a", 1, se=2.0, sc=1.5, reward=3.0, error=None), "correct"),
             _without(line("b", 1, status="incorrect", correct=False, error=None, created=None), "correct"),
             _without(line("c", 1, status="infra_error", correct=False), "correct")]
    results = read_results(write(tmp_path / "other.jsonl", lines))
    assert [r.correct for r in results] == [True, False, False] and results[0].error == ""
    (metrics,) = run_metrics(results)
    assert (metrics.samples, metrics.excluded, metrics.pass_rate) == (2, 1, 0.5)


@pytest.mark.parametrize("bad, named", [
    ({"status": "passed"}, "status 'passed' is not one this reader knows"),
    ({"status": "incorrect", "correct": True}, "'correct' is true but status is 'incorrect'"),
])
def test_a_line_that_cannot_be_counted_is_refused_by_name(tmp_path, bad, named):
    path = write(tmp_path / "bad.jsonl", [line("a", 1, se=2.0, sc=1.5), {**_without(line("b", 1), "correct"), **bad}])
    done = cli("report", str(path), "--out", str(tmp_path / "report"))
    assert done.returncode == 2, done.stderr
    assert f"{path}:2:" in done.stderr and named in done.stderr

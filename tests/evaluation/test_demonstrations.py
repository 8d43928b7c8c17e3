"""Issue 44: demonstrations — a known solution written through the agent's real tools by a scripted agent
(``cuda-agent run --solutions DIR --demonstrate``), recorded as a demonstration, kept by the RFT filter and
counted there as one. Real pieces: the CLI, the tools in the local sandbox, the embedded CPU evaluator, the
records and the filter; no model is involved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from test_runner import FAST, cli, problems, read_lines

pytestmark = [pytest.mark.slow, pytest.mark.verl]


@pytest.fixture(scope="module")
def demonstrated(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    folder = problems(root / "problems", ["solved", "unsolved"])
    shutil.copytree(FAST, root / "solutions" / "solved")  # no folder for "unsolved": nothing to demonstrate
    out, records = root / "demos.jsonl", root / "records"
    args = ["run", "--problems", str(folder), "--device", "cpu", "--solutions", str(root / "solutions"),
            "--demonstrate", "--records", str(records), "--out", str(out), "--json"]
    first = cli(*args)
    second = cli(*args)
    return {"root": root, "first": first, "second": second, "out": out, "records": records}


def test_a_solution_is_written_through_the_tools_and_scored(demonstrated):
    assert demonstrated["first"].returncode == 0, demonstrated["first"].stderr[-3000:]
    lines = read_lines(demonstrated["out"])
    assert set(lines) == {"solved"}, "a task without a solution folder is not demonstrated"
    line = lines["solved"]
    assert line["mode"] == "demonstrations" and line["model"] is None
    assert line["status"] == "ok" and line["correct"] is True and line["reward"] >= 1
    assert line["stop_reason"] == "model_done"
    assert json.loads(demonstrated["second"].stdout)["skipped"] == 1  # resumed: nothing run twice


def test_the_record_is_a_demonstration_with_real_observations(demonstrated):
    from cuda_agent.recipe.records import read_records

    (record,) = read_records([demonstrated["records"]])
    assert record.demonstration == f"solutions:{demonstrated['root'] / 'solutions'}"
    assert record.reward is not None and record.reward >= 1 and record.model is None
    calls = [c["function"]["name"] for m in record.messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert calls[:2] == ["Read", "Bash"] and calls.count("Write") == 2 and calls[-3:] == ["Bash"] * 3
    observations = [m["content"] for m in record.messages if m["role"] == "tool"]
    assert len(observations) == len(calls) and any("class Model" in text for text in observations)  # model.py, read


def test_the_rft_filter_keeps_and_counts_demonstrations(demonstrated):
    sft = demonstrated["root"] / "sft.parquet"
    result = cli("rft", "filter", str(demonstrated["records"]), "--out", str(sft), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["kept"] == 1 and report["demonstrations"] == 1
    import pyarrow.parquet as pq

    assert pq.read_table(sft).column("demonstration").to_pylist() == [f"solutions:{demonstrated['root'] / 'solutions'}"]

"""export: veRL parquet that round-trips through pandas with the dataset contract, SFT, KernelBench folders."""

from __future__ import annotations

import ast
import json

import pandas as pd
import pytest
from dg_helpers import make_task, write_tasks

from cuda_agent.data_gen.export import export, is_validation
from cuda_agent.data_gen.loader import check_source

CONTRACT_EXTRA = {"task_id": str, "problem_src": str, "device": str, "precision_policy": str, "level": int,
                  "source": str, "index": int}


@pytest.fixture
def tasks_path(tmp_path, kernelbench_dir):
    sources = sorted(kernelbench_dir.rglob("*.py"))
    tasks = [make_task(f"t{i}_{p.stem[:12]}", p.read_text(), level=1 + i % 2) for i, p in enumerate(sources)]
    return write_tasks(tmp_path / "tasks.jsonl", tasks)


def test_verl_parquet_round_trips_with_the_contract(tmp_path, tasks_path):
    report = export(tasks_path, tmp_path / "out", device="cuda", formats=["verl"])
    assert report.train_rows == 4 and report.val_rows == 0
    for kind, agent in (("single_turn", "cuda_agent_single_turn"), ("agentic", "cuda_agent")):
        df = pd.read_parquet(tmp_path / "out" / "verl" / f"{kind}.parquet")
        assert list(df.columns) == ["data_source", "agent_name", "prompt", "reward_model", "extra_info"]
        for index, row in df.iterrows():
            assert row.data_source == "cuda_agent/ops" and row.agent_name == agent
            messages = list(row.prompt)
            assert messages and all(set(m) == {"role", "content"} for m in messages)
            assert row.reward_model == {"style": "rule", "ground_truth": row.extra_info["task_id"]}
            extra = row.extra_info
            assert set(extra) == set(CONTRACT_EXTRA)
            assert all(isinstance(extra[k], t) for k, t in CONTRACT_EXTRA.items())
            assert extra["index"] == index and extra["device"] == "cuda" and extra["precision_policy"] == "paper"
            check_source(extra["problem_src"])


def test_prompts_follow_the_answer_format(tmp_path, tasks_path):
    export(tasks_path, tmp_path / "out", device="cpu", formats=["verl"])
    single = pd.read_parquet(tmp_path / "out" / "verl" / "single_turn.parquet").iloc[0]
    text = single.prompt[-1]["content"]
    assert single.extra_info["problem_src"].strip() in text
    assert "```cuda kernels/fused.cu" in text and "```python model_new.py" in text
    agentic = pd.read_parquet(tmp_path / "out" / "verl" / "agentic.parquet").iloc[0]
    assert agentic.extra_info["task_id"] in agentic.prompt[-1]["content"]
    assert len(agentic.prompt[-1]["content"]) < 600


def test_validation_split_is_stable(tmp_path, tasks_path):
    report = export(tasks_path, tmp_path / "out", formats=["verl"], val_fraction=0.5)
    assert report.train_rows + report.val_rows == 4
    val = pd.read_parquet(tmp_path / "out" / "verl" / "agentic_val.parquet") if report.val_rows else None
    if val is not None:
        assert all(is_validation(e["task_id"], 0.5) for e in val.extra_info)
        assert set(val.agent_name) == {"cuda_agent_eval"}


def test_kernelbench_folders_and_manifest(tmp_path, tasks_path):
    report = export(tasks_path, tmp_path / "out", formats=["kernelbench"])
    files = sorted((tmp_path / "out" / "kernelbench").rglob("*.py"))
    assert report.kernelbench_files == len(files) == 4
    assert {f.parent.name for f in files} == {"level1", "level2"}
    assert all(f.name.split("_", 1)[0].isdigit() for f in files)
    for f in files:
        check_source(f.read_text())
    manifest = [json.loads(line) for line in (tmp_path / "out" / "kernelbench" / "manifest.jsonl").read_text().splitlines()]
    assert len(manifest) == 4
    export(tasks_path, tmp_path / "out", formats=["kernelbench"])  # idempotent: same files again
    assert sorted((tmp_path / "out" / "kernelbench").rglob("*.py")) == files


def test_sft_parquet_from_solutions(tmp_path, tasks_path):
    solutions = tmp_path / "solutions" / "t0_1_Square_mat"
    (solutions / "kernels").mkdir(parents=True)
    (solutions / "model_new.py").write_text("import cuda_extension\n")
    (solutions / "kernels" / "mm.cu").write_text("// kernel\n")
    report = export(tasks_path, tmp_path / "out", formats=["sft"], solutions_dir=tmp_path / "solutions")
    assert report.sft_rows == 1
    df = pd.read_parquet(tmp_path / "out" / "sft.parquet")
    messages = list(df.iloc[0].messages)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert "```cuda kernels/mm.cu" in messages[1]["content"] and "```python model_new.py" in messages[1]["content"]
    ast.parse(messages[0]["content"].split("```python model.py\n", 1)[1].split("```", 1)[0])

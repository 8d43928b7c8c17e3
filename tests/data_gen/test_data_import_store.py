"""import (liberal reader of CUDA-Agent-Ops-6K-like layouts) and the JSONL store under it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cuda_agent.data_gen.importer import import_tasks, read_records
from cuda_agent.data_gen.models import Task, TaskKind
from cuda_agent.data_gen.store import JsonlStore
from cuda_agent.errors import ConfigError


@pytest.fixture
def problems(kernelbench_dir) -> list[str]:
    return [p.read_text() for p in sorted(kernelbench_dir.rglob("*.py"))]


def test_import_parquet_with_a_code_column(tmp_path, problems):
    rows = [{"id": f"op{i}", "code": src, "ops": "torch.nn.Conv2d, torch.relu", "level": 2}
            for i, src in enumerate(problems)]
    rows.append({"id": "broken", "code": "def not_a_model(): pass", "ops": "", "level": 1})
    pd.DataFrame(rows).to_parquet(tmp_path / "ops6k.parquet")
    report = import_tasks(tmp_path / "ops6k.parquet", tmp_path / "tasks.jsonl")
    assert (report.read, report.imported, report.invalid) == (5, 4, 1)
    tasks = JsonlStore(tmp_path / "tasks.jsonl", Task).load()
    assert [t.id for t in tasks] == ["ops6k_op0", "ops6k_op1", "ops6k_op2", "ops6k_op3"]
    assert tasks[0].ops == ["torch.nn.Conv2d", "torch.relu"] and tasks[0].kind is TaskKind.IMPORTED
    again = import_tasks(tmp_path / "ops6k.parquet", tmp_path / "tasks.jsonl")
    assert again.imported == 0 and again.skipped_existing == 4


def test_import_guesses_the_code_column_and_reads_folders(tmp_path, problems):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part.jsonl").write_text(
        "".join(json.dumps({"weird_name": src, "Op_Name": f"n{i}"}) + "\n" for i, src in enumerate(problems[:2])))
    (tmp_path / "data" / "extra.py").write_text(problems[2])
    (tmp_path / "data" / "rows.json").write_text(json.dumps({"data": [{"model_code": problems[3]}, {"model_code": problems[3]}]}))
    records = read_records(tmp_path / "data")
    assert len(records) == 5
    report = import_tasks(tmp_path / "data", tmp_path / "tasks.jsonl", prefix="x")
    assert report.imported == 4 and report.duplicates == 1
    with pytest.raises(ConfigError):
        read_records(tmp_path / "tasks_missing")


def test_import_reads_our_own_verl_export(tmp_path, problems):
    from dg_helpers import make_task, write_tasks

    from cuda_agent.data_gen.export import export

    write_tasks(tmp_path / "t.jsonl", [make_task(f"task{i}", s) for i, s in enumerate(problems)])
    export(tmp_path / "t.jsonl", tmp_path / "out", formats=["verl"])
    report = import_tasks(tmp_path / "out" / "verl" / "agentic.parquet", tmp_path / "back.jsonl", prefix="re")
    assert report.imported == 4
    assert {t.id for t in JsonlStore(tmp_path / "back.jsonl", Task).load()} == {f"re_task{i}" for i in range(4)}


def test_store_skips_a_torn_last_line_and_keeps_the_last_duplicate(tmp_path):
    from dg_helpers import make_task

    store = JsonlStore(tmp_path / "s.jsonl", Task)
    a, b = make_task("a", "x = 1\n"), make_task("b", "y = 2\n")
    store.append([a, b, a.model_copy(update={"name": "a2"})])
    with (tmp_path / "s.jsonl").open("a") as handle:
        handle.write('{"id": "torn", "na')
    assert [t.name for t in store.load()] == ["a2", "b"]
    store.append([make_task("c", "z = 3\n")])
    assert [t.id for t in store.load()] == ["a", "b", "c"]
    (tmp_path / "bad.jsonl").write_text('{"oops": 1}\n{"id": "x"}\n')
    with pytest.raises(ConfigError):
        JsonlStore(tmp_path / "bad.jsonl", Task).load()

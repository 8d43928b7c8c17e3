"""`cuda-agent data`: every command has --help; the stages chain on the CPU; the pipeline runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from cuda_agent.data_gen.cli import app
from cuda_agent.data_gen.models import Task
from cuda_agent.data_gen.store import JsonlStore

COMMANDS = ["crawl", "compose", "filter", "decontam", "export", "import", "import-ops6k", "pipeline"]
runner = CliRunner()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_data_group_is_mounted_and_light():
    code = ("import sys; from typer.testing import CliRunner; from cuda_agent.cli.main import app; "
            "r = CliRunner().invoke(app, ['data', '--help']); assert r.exit_code == 0, r.output; "
            "assert not {'torch', 'ray', 'pandas', 'transformers'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_stages_chain_through_the_cli(tmp_path, kernelbench_dir):
    def ok(*args: str) -> str:
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result.output

    ok("crawl", "--out", tmp_path / "seeds.jsonl", "--library", "torch", "--no-check")
    ok("compose", "--out", tmp_path / "c.jsonl", "--count", 4, "--size", "tiny", "--seeds", tmp_path / "seeds.jsonl")
    ok("filter", tmp_path / "c.jsonl", "--out", tmp_path / "f", "--device", "cpu", "--min-ms", 0, "--workers", 2,
       "--compile-backend", "eager")
    ok("decontam", tmp_path / "f" / "kept.jsonl", "--kernelbench", kernelbench_dir, "--out", tmp_path / "d")
    ok("export", tmp_path / "d" / "clean.jsonl", "--out", tmp_path / "e", "--device", "cpu")
    kept = JsonlStore(tmp_path / "d" / "clean.jsonl", Task).load()
    assert kept, "at least one composed tiny task should survive"
    assert len(pd.read_parquet(tmp_path / "e" / "verl" / "agentic.parquet")) == len(kept)


def test_usage_errors_exit_with_code_2(tmp_path):
    (tmp_path / "t.jsonl").write_text("")
    result = runner.invoke(app, ["filter", str(tmp_path / "t.jsonl"), "--device", "tpu"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["filter", str(tmp_path / "t.jsonl"), "--device", "cpu", "--min-ms", "5",
                                 "--max-ms", "1"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["compose", "--composer", "llm", "--out", str(tmp_path / "x.jsonl")])
    assert result.exit_code == 2


@pytest.mark.slow
def test_pipeline_end_to_end_on_cpu(tmp_path, kernelbench_dir):
    result = runner.invoke(app, ["pipeline", "--device", "cpu", "--count", "6", "--include-seeds", "3", "--out",
                                 str(tmp_path), "--compile-backend", "eager", "--workers", "2", "--min-ms", "0",
                                 "--recheck", "--kernelbench", str(kernelbench_dir)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "pipeline_report.json").read_text())
    assert report["compose"]["written"] == 6
    assert report["filter"]["total"] == 9 and report["filter"]["tasks_per_minute"] > 0
    assert report["filter"]["recheck"]["rechecked"] == report["filter"]["kept"]
    assert report["decontam"]["total"] == report["filter"]["kept"]
    assert report["export"]["train_rows"] == report["decontam"]["kept"]
    assert (tmp_path / "export" / "verl" / "single_turn.parquet").exists()

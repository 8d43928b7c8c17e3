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


def test_pipeline_end_to_end_on_cpu(tmp_path, kernelbench_dir):
    """The CI pipeline run: small, fast, and every report it promises (measured: ~25 s on the 2-core CI box)."""
    result = runner.invoke(app, ["pipeline", "--device", "cpu", "--count", "6", "--include-seeds", "3", "--out",
                                 str(tmp_path), "--compile-backend", "eager", "--workers", "2", "--min-ms", "0",
                                 "--recheck", "--kernelbench", str(kernelbench_dir), "--threshold", "0.95",
                                 "--val-fraction", "0.5"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "pipeline_report.json").read_text())
    composed = report["compose"]["existing"] + report["compose"]["written"]
    dead = sum(report["filter"]["by_criterion"].get(c, 0) for c in ("dead_operator", "dead_input"))
    assert 6 <= report["compose"]["requested"] <= 6 + dead  # one redraw round for the dead tasks
    assert composed == report["compose"]["requested"]
    assert composed >= 6 and report["filter"]["total"] == composed + 3 and report["filter"]["tasks_per_minute"] > 0
    assert report["filter"]["recheck"]["rechecked"] == report["filter"]["kept"]
    assert report["decontam"]["total"] == report["filter"]["kept"] and report["decontam"]["threshold"] == 0.95
    assert report["decontaminated"] is True
    assert report["export"]["train_rows"] + report["export"]["val_rows"] == report["decontam"]["kept"]
    assert report["config"]["val_fraction"] == 0.5
    assert (tmp_path / "export" / "verl" / "single_turn.parquet").exists()
    dataset = json.loads((tmp_path / "dataset_report.json").read_text())
    assert dataset["tasks"] == report["decontam"]["kept"]
    assert sum(dataset["chain_length"].values()) == dataset["tasks"]
    assert sum(b["count"] for b in dataset["eager_ms_histogram"]) == dataset["tasks"]
    assert dataset["drop_reasons"]["filter"] == report["filter"]["by_criterion"]
    assert max(dataset["operator_frequency"].values()) <= dataset["tasks"]
    assert (tmp_path / "eager_ms.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Operator frequency" in (tmp_path / "dataset_report.md").read_text()

    # a rerun with another size preset must not reuse the seeds and tasks made at this one
    rerun = runner.invoke(app, ["pipeline", "--device", "cpu", "--count", "6", "--out", str(tmp_path), "--size",
                                "small", "--no-decontam"])
    assert rerun.exit_code == 2 and "Start fresh" in rerun.output


def test_pipeline_refuses_to_skip_decontamination_silently(tmp_path):
    result = runner.invoke(app, ["pipeline", "--device", "cpu", "--count", "2", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--no-decontam" in result.output
    assert not (tmp_path / "export").exists()


def test_a_stage_with_nothing_to_pass_on_exits_non_zero(tmp_path):
    from dg_helpers import make_task, write_tasks

    source = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n\n    def forward(self, x):\n        return torch.relu(x)\n\n\n"
              "def get_inputs():\n    return [torch.randn(64)]\n\n\ndef get_init_inputs():\n    return []\n")
    tasks = write_tasks(tmp_path / "t.jsonl", [make_task("relu", source)])
    result = runner.invoke(app, ["filter", str(tasks), "--out", str(tmp_path / "f"), "--device", "cpu", "--min-ms",
                                 "1000", "--max-ms", "2000", "--no-compile"])
    assert result.exit_code == 2, result.output
    assert "filter ended with no task to pass on" in " ".join(result.output.split())
    empty = write_tasks(tmp_path / "empty.jsonl", [])
    result = runner.invoke(app, ["export", str(empty), "--out", str(tmp_path / "e"), "--device", "cpu"])
    assert result.exit_code == 2 and "no task" in result.output.lower()


def test_crawl_and_compose_agree_on_the_default_size():
    import click
    import typer

    from cuda_agent.data_gen.compose import compose
    from cuda_agent.data_gen.crawl import crawl
    from cuda_agent.data_gen.ops import DEFAULT_SIZE

    assert crawl.__kwdefaults__["size"] == compose.__kwdefaults__["size"] == DEFAULT_SIZE
    group = typer.main.get_command(app)
    for name in ("crawl", "compose"):
        command = group.get_command(click.Context(group), name)
        size = next(p for p in command.params if p.name == "size")
        assert size.default == DEFAULT_SIZE, name

"""Stage 2 RFT filter: each rule on trajectories built to trip it, the CLI table and its bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from records_data import call, conversation, good_turns, record

from cuda_agent.recipe.records import TrajectoryFlags, read_records, write_parquet
from cuda_agent.recipe.rft import RULES, RftThresholds, filter_records, tripped_rules

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "cuda_agent.cli.main"]


def _idle_turns(count: int):
    return [[call("Read", {"file_path": f"f{i}.py"})] for i in range(count)]


TRIPS = {
    "infra_failure": lambda: record(infra_failure=True, reward=None, status="infra_error"),
    "not_positive_reward": lambda: record(reward=0.0),
    "malformed_calls": lambda: record(conversation([[call("Bash", '{"command": ')]])),
    "unknown_tools": lambda: record(conversation([[call("Browse", {"url": "http://x"})]])),
    "schema_errors": lambda: record(conversation([[call("Write", {"file_path": 3, "content": "x"})]])),
    "repeated_calls": lambda: record(conversation([[call("Bash", {"command": "nvidia-smi"})]] * 4)),
    "idle_turns": lambda: record(conversation(_idle_turns(21))),
}


@pytest.mark.parametrize("rule", RULES)
def test_each_rule_trips_on_its_own_trajectory(rule):
    assert tripped_rules(TRIPS[rule](), RftThresholds()) == [rule]


def test_clean_trajectory_is_kept():
    assert tripped_rules(record(), RftThresholds()) == []


def test_thresholds_are_options():
    assert tripped_rules(TRIPS["repeated_calls"](), RftThresholds(max_repeated_calls=4)) == []
    assert tripped_rules(TRIPS["idle_turns"](), RftThresholds(max_idle_turns=30)) == []
    assert tripped_rules(record(reward=0.5), RftThresholds(min_reward=0.5)) == ["not_positive_reward"]


def test_stored_flags_count_what_messages_cannot_show():
    # calls the loop refused never reach tool_calls; the writer counts them in the flags
    rec = record().model_copy(update={"flags": TrajectoryFlags(malformed_calls=2, max_repeated_calls=1)})
    assert tripped_rules(rec, RftThresholds()) == ["malformed_calls"]


def test_first_rule_drops_every_rule_counts():
    both = record(conversation([[call("Browse", {})]]), reward=-1.0)
    kept, report = filter_records([record(), both, TRIPS["idle_turns"]()], RftThresholds())
    assert len(kept) == 1 and report.read == 3 and report.kept == 1
    counts = {c.rule: (c.dropped, c.tripped) for c in report.rules}
    assert counts["not_positive_reward"] == (1, 1)
    assert counts["unknown_tools"] == (0, 1)
    assert counts["idle_turns"] == (1, 1)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "rft", "filter", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_cli_writes_sft_parquet_and_prints_the_table(tmp_path):
    shards = tmp_path / "trajectories"
    shards.mkdir()
    write_parquet([record(), TRIPS["repeated_calls"](), TRIPS["infra_failure"]()], shards / "a.parquet")
    write_parquet([record(conversation(good_turns(), final="Finished."))], shards / "b.parquet")
    out = tmp_path / "sft.parquet"
    result = _cli(str(shards), "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "kept 2 of 4" in result.stdout
    assert "repeated_calls" in result.stdout and "infra_failure" in result.stdout
    assert len(list(read_records([out]))) == 2

    as_json = _cli(str(shards), "--out", str(out), "--json", cwd=tmp_path)
    report = json.loads(as_json.stdout)
    assert report["kept"] == 2
    assert {c["rule"]: c["dropped"] for c in report["rules"]}["infra_failure"] == 1


@pytest.mark.parametrize(
    "setup, words",
    [
        (lambda p: p.write_bytes(b""), "empty file"),
        (lambda p: p.write_text("garbage"), "not a readable parquet file"),
        (lambda p: write_parquet([record(conversation(good_turns(), final=None))], p), "not an assistant turn"),
        (lambda p: write_parquet([TRIPS["infra_failure"]()], p), "no trajectory passed the filter"),
        (lambda p: None, "no such trajectory file"),
    ],
    ids=["empty", "malformed", "no-final-assistant", "nothing-kept", "missing"],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, setup, words):
    path = tmp_path / "in.parquet"
    setup(path)
    result = _cli(str(path), "--out", str(tmp_path / "sft.parquet"), cwd=tmp_path)
    assert result.returncode == 2
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "sft.parquet").exists()

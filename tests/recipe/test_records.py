"""Trajectory records: the model, its flags, parquet round trips, the writer and the reader's errors."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from records_data import TOOLS, call, conversation, good_turns, record

from cuda_agent.errors import ConfigError
from cuda_agent.recipe.records import (
    RecordWriter,
    TrajectoryRecord,
    flags_from_messages,
    read_records,
    write_parquet,
)


def test_round_trip_through_parquet_keeps_every_field(tmp_path):
    original = record()
    write_parquet([original], tmp_path / "one.parquet")
    (loaded,) = read_records([tmp_path / "one.parquet"])
    assert loaded == original
    assert loaded.tools == TOOLS  # the struct merge's null keys are dropped again


def test_dict_arguments_become_json_text():
    messages = conversation([[{"type": "function", "function": {"name": "Bash", "arguments": {"command": "ls"}}}]])
    rec = record(messages)
    assert rec.messages[2]["tool_calls"][0]["function"]["arguments"] == '{"command": "ls"}'


def test_unknown_message_key_is_refused():
    with pytest.raises(ValueError, match="keys"):
        record([{"role": "user", "content": "x", "weird": 1}])


def test_clean_trajectory_has_clean_flags():
    flags = flags_from_messages(conversation(good_turns()), TOOLS)
    assert (flags.malformed_calls, flags.unknown_tool_calls, flags.schema_errors) == (0, 0, 0)
    assert flags.max_repeated_calls == 1
    # Write changes a file; Bash compile and Read do not; the final answer does not either
    assert flags.max_idle_turns == 3


def test_flags_count_each_defect():
    turns = [
        [call("Bash", "{not json")],
        [call("Browse", {"url": "x"})],
        [call("Write", {"file_path": "a.py"})],  # content missing: fails the schema
        [call("Bash", {"command": "ls"})],
        [call("Bash", {"command": "ls"})],
        [call("Bash", {"command": "ls"})],
    ]
    flags = flags_from_messages(conversation(turns), TOOLS)
    assert flags.malformed_calls == 1
    assert flags.unknown_tool_calls == 1
    assert flags.schema_errors == 1
    assert flags.max_repeated_calls == 3


def test_measured_file_changes_override_the_estimate():
    messages = conversation(good_turns())
    flags = flags_from_messages(messages, TOOLS, changed_files_per_turn=[False, False, True, False])
    assert flags.max_idle_turns == 2


def test_bash_redirection_counts_as_a_file_change():
    turns = [[call("Bash", {"command": "echo x > a.cu"})], [call("Bash", {"command": "cat a.cu"})]]
    flags = flags_from_messages(conversation(turns, final=None), TOOLS)
    assert flags.max_idle_turns == 1


def _write_some(folder: str, count: int) -> None:
    with RecordWriter(folder, shard_prefix="proc") as writer:
        for index in range(count):
            writer.write(record(task_id=f"task{index}"))


def test_writer_is_safe_across_processes(tmp_path):
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_some, args=(str(tmp_path), 3)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    records = list(read_records([tmp_path]))
    assert len(records) == 6
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_reader_errors_are_one_line_config_errors(tmp_path):
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.parquet"
    garbage.write_text("not parquet")
    for path, words in [
        (empty, "empty file"),
        (garbage, "not a readable parquet file"),
        (tmp_path / "missing.parquet", "no such trajectory file"),
    ]:
        with pytest.raises(ConfigError, match=words) as info:
            list(read_records([path]))
        assert "\n" not in str(info.value)
    (tmp_path / "none").mkdir()
    with pytest.raises(ConfigError, match="no .parquet"):
        list(read_records([tmp_path / "none"]))


def test_reader_rejects_a_row_that_is_not_a_record(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"messages": [[{"role": "user", "content": "x"}]]}), tmp_path / "bad.parquet")
    with pytest.raises(ConfigError, match="row 0 is not a trajectory record"):
        list(read_records([tmp_path / "bad.parquet"]))


def test_to_row_is_json_serialisable_apart_from_structure():
    row = record().to_row()
    json.dumps(row)
    assert set(row) == set(TrajectoryRecord.model_fields)
    assert isinstance(row["tools"], list) and isinstance(row["tools"][0], dict)
    assert all(set(m) == {"role", "content", "tool_calls", "tool_call_id", "name"} for m in row["messages"])


def test_writer_shards_are_named_by_prefix(tmp_path: Path):
    with RecordWriter(tmp_path, shard_prefix="worker7") as writer:
        writer.write(record())
    (shard,) = tmp_path.glob("*.parquet")
    assert shard.name.startswith("worker7-")

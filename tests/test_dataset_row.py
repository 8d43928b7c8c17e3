"""The dataset row's ``extra_info`` as one typed contract (issue 37): what the writers store, the readers take."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_agent.dataset_row import RowInfo
from cuda_agent.errors import ConfigError
from cuda_agent.reward_fns.options import RewardOptions, TaskSpec

REPO = Path(__file__).resolve().parents[1]


def test_the_example_rows_are_the_contract_and_read_back_unchanged() -> None:
    sys.path.insert(0, str(REPO / "examples" / "data"))
    from make_example_parquet import rows

    for agentic in (False, True):
        for row in rows(REPO / "examples" / "problems", "cpu", agentic):
            info = RowInfo.read(row["extra_info"], where="example")
            assert info.to_row() == row["extra_info"]
            assert info.device == "cpu" and info.problem_src and info.task_id.startswith("examples/")


def test_a_bad_value_names_the_row_and_the_key() -> None:
    with pytest.raises(ConfigError, match=r"--dataset d.parquet: row 3: invalid extra_info \(device: "):
        RowInfo.read({"problem_src": "x", "device": "tpu"}, where="--dataset d.parquet: row 3")
    with pytest.raises(ConfigError, match="max_turns"):
        RowInfo.read({"max_turns": 0})
    with pytest.raises(ConfigError, match="must be an object"):
        RowInfo.read(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_parquet_values_and_other_keys_are_taken_as_they_come() -> None:
    info = RowInfo.read({"task_id": 7, "level": np.int64(2), "max_turns": np.int64(5), "tools_kwargs": {"a": 1}})
    assert (info.task_id, info.level, info.max_turns) == ("7", 2, 5)
    assert type(info.level) is int and info.to_row()["tools_kwargs"] == {"a": 1}
    assert info.policy.value == "paper"  # the default filled in, not stored


def test_the_reward_reads_the_task_through_the_contract() -> None:
    task = TaskSpec.from_extra_info({"problem_src": "src", "device": "cpu", "precision_policy": "strict",
                                     "task_id": 12}, RewardOptions())
    assert (task.task_id, task.device, task.precision_policy.value) == ("12", "cpu", "strict")
    with pytest.raises(ConfigError, match="extra_info.problem_src is missing"):
        TaskSpec.from_extra_info({"device": "cpu"}, RewardOptions())
    with pytest.raises(ConfigError, match="invalid extra_info"):
        TaskSpec.from_extra_info({"problem_src": "src", "device": "cpu", "precision_policy": "loose"}, RewardOptions())

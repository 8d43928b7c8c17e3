"""The tasks a reward request may name: rows of veRL parquet datasets, keyed by task id.

A dataset is what ``examples/data/make_example_parquet.py`` or ``cuda-agent data export``
writes (README, "Dataset contract"): each row's ``extra_info`` holds ``task_id``,
``problem_src``, ``device`` and ``precision_policy``; ``reward_model.ground_truth`` is the
task id. A request's label is that id, or the row's ``reward_model`` / ``extra_info`` object
itself (what OpenRLHF sends with ``--data.label_key reward_model``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cuda_agent.errors import ConfigError
from cuda_agent.reward_fns.options import RewardOptions, TaskSpec


class UnknownTaskError(ConfigError):
    """A label that names no task of the service's datasets."""


class TaskTable:
    """Task id -> TaskSpec, from one or more datasets."""

    def __init__(self, tasks: Mapping[str, TaskSpec], sources: Iterable[Path] = ()) -> None:
        self.tasks = dict(tasks)
        self.sources = [str(p) for p in sources]

    def __len__(self) -> int:
        return len(self.tasks)

    @classmethod
    def load(cls, paths: Iterable[Path], device: str) -> "TaskTable":
        """Read every dataset; `device` overrides the rows' (the service evaluates on one device)."""
        paths = list(paths)
        tasks: dict[str, TaskSpec] = {}
        options = RewardOptions(device=device)  # type: ignore[arg-type]
        for path in paths:
            for number, row in enumerate(_rows(path)):
                info = row.get("extra_info")
                if not isinstance(info, Mapping):
                    raise ConfigError(f"{path} row {number}: no extra_info object; is it a cuda_agent veRL dataset "
                                      "(examples/data/make_example_parquet.py, `cuda-agent data export`)?")
                task = TaskSpec.from_extra_info(info, options)
                task_id = task.task_id or _ground_truth(row)
                if not task_id:
                    raise ConfigError(f"{path} row {number}: no extra_info.task_id nor reward_model.ground_truth")
                known = tasks.get(task_id)
                if known is not None and known.problem_src != task.problem_src:
                    raise ConfigError(f"{path}: task {task_id!r} appears twice with different problems; "
                                      "give each task its own id")
                tasks[task_id] = task.model_copy(update={"task_id": task_id})
        return cls(tasks, paths)

    def resolve(self, label: Any) -> TaskSpec:
        """The task a request label names; `UnknownTaskError` if none."""
        task_id = label_task_id(label)
        task = self.tasks.get(task_id) if task_id else None
        if task is None:
            hint = f"the service knows {len(self.tasks)} tasks from {', '.join(self.sources) or 'no dataset'}"
            raise UnknownTaskError(f"unknown task {task_id or label!r}; {hint} (start it with --tasks DATASET)")
        return task


def label_task_id(label: Any) -> str | None:
    """The task id in a label: the string itself, or an object's ground_truth / task_id."""
    if isinstance(label, str):
        return label
    if isinstance(label, Mapping):
        value = label.get("ground_truth") or label.get("task_id")
        return value if isinstance(value, str) else None
    return None


def _ground_truth(row: Mapping[str, Any]) -> str | None:
    reward_model = row.get("reward_model")
    return label_task_id(reward_model) if isinstance(reward_model, Mapping) else None


def _rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise ConfigError(f"dataset {path} not found; write one with `python examples/data/make_example_parquet.py` "
                          "or `cuda-agent data export`")
    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise ConfigError(f"{path} is not a readable parquet dataset ({exc})") from exc

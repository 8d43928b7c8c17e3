"""Where the runner's tasks come from: our parquet datasets, a folder of problem files, KernelBench.

A KernelBench checkout (github.com/ScalingIntelligence/KernelBench) is read as its files are:
``KernelBench/level<N>/<index>_<Name>.py``, each a reference ``Model`` with ``get_inputs`` and
``get_init_inputs`` — the format our evaluator takes unchanged. Task ids are
``level<N>/<file stem>``. Nothing of KernelBench is vendored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.dataset_row import RowInfo
from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.harness import Device, PrecisionPolicy

PromptMode = Literal["agentic", "single-turn"]
_AGENT_NAMES: dict[str, PromptMode] = {"cuda_agent": "agentic", "cuda_agent_single_turn": "single-turn"}
_KB_FILE = re.compile(r"^(?P<index>\d+)_.+\.py$")
KERNELBENCH_SOURCE = "kernelbench"


class Task(BaseModel):
    """One problem the runner works on."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(description="Unique id; also the folder name of its solution under --solutions.")
    level: int | None = Field(None, description="Difficulty level (KernelBench level), None if unknown.")
    data_source: str | None = Field(None, description="Origin: the dataset's data_source, 'kernelbench', 'problems'.")
    problem_src: str = Field(description="Reference model.py source.")
    device: Device = Field(description="Where the kernels compile and run.")
    precision_policy: PrecisionPolicy = Field(PrecisionPolicy.PAPER, description="Precision policy.")
    prompt: list[dict[str, Any]] | None = Field(None, description="The dataset row's prompt messages, if any.")
    prompt_mode: PromptMode | None = Field(None, description="Which mode the dataset prompt was written for.")
    max_turns: int | None = Field(None, ge=1, description="Per-task turn limit (dataset extra_info.max_turns).")


def parse_levels(text: str | None) -> list[int] | None:
    """'1,2,3' -> [1, 2, 3]; None -> None."""
    if text is None or not text.strip():
        return None
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(f"--level {text!r} is not a list of level numbers; use e.g. --level 1,2,3") from None
    if not levels or any(level < 1 for level in levels):
        raise ConfigError(f"--level {text!r}: levels are positive integers, e.g. --level 1,2")
    return levels


def kernelbench_root(folder: Path) -> Path:
    """The folder holding level1/, level2/, ... of a checkout (DIR or DIR/KernelBench)."""
    for candidate in (folder / "KernelBench", folder):
        if any(candidate.glob("level*/*.py")):
            return candidate
    raise ConfigError(
        f"{folder} is not a KernelBench checkout: no KernelBench/level<N>/*.py files under it; "
        "clone it with `git clone https://github.com/ScalingIntelligence/KernelBench` and pass that folder"
    )


def kernelbench_tasks(folder: Path, levels: Sequence[int] | None, device: Device) -> list[Task]:
    """The problems of the given levels of a KernelBench checkout, in KernelBench's order."""
    root = kernelbench_root(folder)
    available = sorted(int(p.name[5:]) for p in root.glob("level*") if p.is_dir() and p.name[5:].isdigit())
    wanted = list(levels) if levels else [level for level in available if level <= 3]
    missing = [level for level in wanted if level not in available]
    if missing:
        raise ConfigError(f"{root} has no level(s) {missing}; available: {available}")
    tasks = []
    for level in wanted:
        files = [path for path in (root / f"level{level}").glob("*.py") if _KB_FILE.match(path.name)]
        for path in sorted(files, key=lambda p: int(_KB_FILE.match(p.name).group("index"))):  # type: ignore[union-attr]
            tasks.append(Task(task_id=f"level{level}/{path.stem}", level=level, data_source=KERNELBENCH_SOURCE,
                              problem_src=path.read_text(encoding="utf-8"), device=device))
    return tasks


def folder_tasks(folder: Path, device: Device, level: int | None = None) -> list[Task]:
    """Every ``*.py`` problem file of a folder (task id: the file stem)."""
    if not folder.is_dir():
        raise ConfigError(f"--problems {folder} is not a folder; pass a folder of KernelBench-format *.py files")
    files = sorted(folder.glob("*.py"))
    if not files:
        raise ConfigError(f"--problems {folder} holds no *.py problem files")
    return [Task(task_id=path.stem, level=level, data_source="problems", problem_src=path.read_text(encoding="utf-8"),
                 device=device) for path in files]


def dataset_tasks(path: Path, device: Device | None) -> list[Task]:
    """The rows of one of our parquet datasets (docs/verl.md, 'Dataset contract')."""
    import pandas as pd

    if not path.is_file():
        raise ConfigError(f"--dataset {path}: no such parquet file")
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise ConfigError(f"--dataset {path}: not a readable parquet file ({type(exc).__name__})") from None
    tasks = []
    for index, row in enumerate(frame.to_dict("records")):
        info = RowInfo.read(_plain(row.get("extra_info")), where=f"--dataset {path}: row {index}")
        if not info.problem_src:
            raise ConfigError(f"--dataset {path}: row {index} has no extra_info.problem_src (see docs/verl.md)")
        row_device = device or info.device
        if row_device is None:
            raise ConfigError(f"--dataset {path}: row {index} has no extra_info.device; pass --device cpu|cuda")
        prompt = _plain(row.get("prompt"))
        tasks.append(Task(
            task_id=info.task_id or f"{path.stem}/{index}",
            level=info.level,
            data_source=row.get("data_source"),
            problem_src=info.problem_src,
            device=row_device,
            precision_policy=info.policy,
            prompt=list(prompt) if prompt is not None else None,
            prompt_mode=_AGENT_NAMES.get(str(row.get("agent_name"))),
            max_turns=info.max_turns,
        ))
    return tasks


def select(tasks: Iterable[Task], pattern: str | None, limit: int | None) -> list[Task]:
    """Tasks whose id matches the regular expression ``pattern``, at most ``limit`` of them."""
    chosen = list(tasks)
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"--tasks {pattern!r} is not a regular expression ({exc})") from None
        chosen = [task for task in chosen if regex.search(task.task_id)]
    if limit is not None:
        chosen = chosen[:limit]
    ids = [task.task_id for task in chosen]
    duplicates = sorted({task_id for task_id in ids if ids.count(task_id) > 1})
    if duplicates:
        raise ConfigError(f"task ids must be unique; repeated: {duplicates[:5]}")
    if not chosen:
        raise ConfigError("no task selected; check --tasks / --limit and the task source")
    return chosen


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def interleave_levels(tasks: Sequence[Task]) -> list[Task]:
    """Round-robin over levels (level 1's first task, level 2's first, ...), each level in its own order:
    a pass cut by a time budget still covers every level."""
    by_level: dict[int | None, list[Task]] = {}
    for task in tasks:
        by_level.setdefault(task.level, []).append(task)
    queues = list(by_level.values())
    out: list[Task] = []
    for index in range(max((len(queue) for queue in queues), default=0)):
        out.extend(queue[index] for queue in queues if index < len(queue))
    return out


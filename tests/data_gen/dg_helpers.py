"""Helpers shared by the data_gen tests (a plain module: conftest names collide across test folders)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cuda_agent.data_gen.models import Provenance, Task, TaskKind
from cuda_agent.data_gen.store import JsonlStore

KERNELBENCH_FIXTURE = Path(__file__).parent / "kernelbench_fixture"


def make_task(task_id: str, source: str, *, ops: list[str] | None = None, level: int = 2) -> Task:
    """A hand-written task (source dedented)."""
    return Task(id=task_id, name=task_id, source=textwrap.dedent(source).lstrip(), ops=ops or ["torch.test"],
                kind=TaskKind.FUSED, level=level, provenance=Provenance(generator="test"))


def write_tasks(path: Path, tasks: list[Task]) -> Path:
    JsonlStore(path, Task).write(tasks)
    return path

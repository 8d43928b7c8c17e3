"""Fixtures of the data_gen tests: tiny crawled seeds, task builders, the KernelBench fixture folder."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def seeds_report(tmp_path_factory: pytest.TempPathFactory):
    """Crawl every operator once per session (tiny sizes, each seed run on the CPU)."""
    from cuda_agent.data_gen.crawl import crawl

    path = tmp_path_factory.mktemp("crawl") / "seeds.jsonl"
    return path, crawl(path, size="tiny", check=True)


@pytest.fixture(scope="session")
def seeds_path(seeds_report) -> Path:
    return seeds_report[0]


@pytest.fixture
def kernelbench_dir() -> Path:
    return KERNELBENCH_FIXTURE

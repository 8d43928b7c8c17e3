"""Fixtures of the data_gen tests: crawled tiny seeds (once per session), the KernelBench fixture folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from dg_helpers import KERNELBENCH_FIXTURE


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

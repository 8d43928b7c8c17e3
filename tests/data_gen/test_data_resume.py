"""Resume never serves stale results: each stage's cache is keyed on its inputs and settings.

A changed setting is judged again (filter, decontam) or refused with a message that says how to
start fresh (crawl, compose); parallelism settings reuse what was judged.
"""

from __future__ import annotations

import pytest
from dg_helpers import make_task, write_tasks

from cuda_agent.data_gen.compose import compose
from cuda_agent.data_gen.crawl import crawl
from cuda_agent.data_gen.filter import FilterConfig, filter_tasks
from cuda_agent.data_gen.filter.models import FilterResult
from cuda_agent.data_gen.models import Task
from cuda_agent.data_gen.stage import SettingsChangedError, settings_path
from cuda_agent.data_gen.store import JsonlStore

RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(4, 3, 32, 32)]


def get_init_inputs():
    return []
'''


def _config(**overrides) -> FilterConfig:
    values = dict(device="cpu", min_ms=0.0, max_ms=5000.0, compile=False, workers=1, timeout_s=120.0, min_runs=3,
                  min_time_s=0.01, exclusive_timing=False, draws=3)
    values.update(overrides)
    return FilterConfig(**values)


def test_crawl_refuses_other_settings_and_says_how_to_start_fresh(tmp_path):
    out = tmp_path / "seeds.jsonl"
    first = crawl(out, libraries=["torch"], size="tiny", check=False)
    assert first.written > 300 and settings_path(out).exists()
    assert crawl(out, libraries=["torch"], size="tiny", check=False).written == 0  # same settings: resumes
    for changed in ({"size": "small"}, {"check": True}, {"libraries": ["torch", "transformers"]}):
        kwargs = {"libraries": ["torch"], "size": "tiny", "check": False, **changed}
        with pytest.raises(SettingsChangedError, match="delete .*seeds.jsonl") as info:
            crawl(out, **kwargs)
        assert next(iter(changed)) in str(info.value)


def test_compose_refuses_other_settings_and_counts_a_resume_apart_from_duplicates(tmp_path):
    out = tmp_path / "composed.jsonl"
    first = compose(out, count=6, size="tiny", seed=4)
    assert first.written == 6
    again = compose(out, count=9, size="tiny", seed=4)  # replays the 6, then appends 3
    assert (again.existing, again.written, again.resumed, again.duplicates) == (6, 3, 6, 0)
    for changed in ({"size": "small"}, {"seed": 5}, {"min_ops": 3}, {"max_ops": 4}):
        with pytest.raises(SettingsChangedError, match="Start fresh"):
            compose(out, count=9, **{"size": "tiny", "seed": 4, **changed})
    assert len(JsonlStore(out, Task).load()) == 9


@pytest.fixture(scope="module")
def judged_once(tmp_path_factory):
    folder = tmp_path_factory.mktemp("resume")
    tasks = write_tasks(folder / "tasks.jsonl", [make_task("relu", RELU)])
    report = filter_tasks(tasks, folder / "out", _config())
    assert report.kept == 1 and report.processed == 1
    return folder, report


@pytest.mark.parametrize("changed", [
    {"min_ms": 1000.0, "max_ms": 5000.0},   # the window
    {"seed": 3},                            # parameters and input draws
    {"atol": 1e-3, "rtol": 1e-3},           # the tolerance
    {"compile": True, "compile_backend": "eager"},
    {"draws": 4},
])
def test_a_changed_filter_setting_judges_again(judged_once, tmp_path, changed):
    folder, _ = judged_once
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes((folder / "out" / "results.jsonl").read_bytes())
    report = filter_tasks(folder / "tasks.jsonl", out, _config(**changed))
    assert (report.processed, report.rejudged) == (1, 1)
    if "min_ms" in changed:
        assert report.kept == 0 and report.by_criterion == {"too_fast": 1}


def test_device_is_part_of_the_key_and_parallelism_is_not():
    base = _config()
    assert FilterConfig(device="cuda", workers=1).settings_key() != base.settings_key()
    assert _config(workers=2, threads_per_worker=2).settings_key() == base.settings_key()


def test_parallelism_and_reruns_reuse_verdicts_and_keep_the_throughput(judged_once):
    folder, first = judged_once
    again = filter_tasks(folder / "tasks.jsonl", folder / "out", _config(workers=2))
    assert (again.processed, again.rejudged, again.kept) == (0, 0, 1)
    assert again.throughput_from_previous_run and again.tasks_per_minute == first.tasks_per_minute > 0


def test_a_changed_source_under_the_same_id_is_judged_again(judged_once, tmp_path):
    folder, _ = judged_once
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes((folder / "out" / "results.jsonl").read_bytes())
    changed = write_tasks(tmp_path / "t.jsonl", [make_task("relu", RELU.replace("torch.relu(", "0 * torch.relu("))])
    report = filter_tasks(changed, out, _config())
    assert report.rejudged == 1 and report.by_criterion == {"constant_output": 1}
    verdicts = JsonlStore(out / "results.jsonl", FilterResult).load()
    assert len(verdicts) == 1 and verdicts[0].criterion is not None

"""filter: every criterion on hand-made tasks, process isolation, resumability, recheck, Ray."""

from __future__ import annotations

import json

import pytest

from cuda_agent.data_gen.filter import Criterion, FilterConfig, filter_tasks
from cuda_agent.data_gen.filter.models import FilterResult
from cuda_agent.data_gen.models import Task
from cuda_agent.data_gen.store import JsonlStore

from dg_helpers import make_task, write_tasks

HEADER = "import torch\nimport torch.nn as nn\n\n\n"
GET_INIT = "\n\ndef get_init_inputs():\n    return []\n"


def model(forward: str, inputs: str = "torch.randn(8, 3, 64, 64)", init: str = "pass", extra: str = "") -> str:
    """A task source: `forward` is the body of forward(self, x)."""
    return (
        f"{HEADER}{extra}class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        f"        {init}\n\n    def forward(self, x):\n        {forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n{GET_INIT}"
    )


CONV = "self.conv = nn.Conv2d(3, 16, 3)"
GOOD = {
    "good_conv_relu": model("return torch.relu(self.conv(x))", init=CONV),
    "good_conv_gelu_sum": model("return torch.nn.functional.gelu(self.conv(x)).sum(dim=1)", init=CONV),
}
EXPECTED = {
    "const_zero": (model("return x * 0"), Criterion.CONSTANT_OUTPUT),
    "const_tiny": (model("return x * 1e-4"), Criterion.CONSTANT_OUTPUT),
    "const_value": (model("return torch.ones_like(x) * 3.0"), Criterion.CONSTANT_OUTPUT),
    "const_softmax": (model("return torch.softmax(x.flatten(1), dim=1)"), Criterion.CONSTANT_OUTPUT),
    "same_for_all_inputs": (model("return self.w + 0.0 * x.sum()", init="self.w = nn.Parameter(torch.randn(256))"),
                            Criterion.INDISTINGUISHABLE),
    "scalar_mean": (model("return x.mean()", inputs="torch.randn(1 << 20)"), Criterion.INDISTINGUISHABLE),
    "dropout": (model("return torch.nn.functional.dropout(x, 0.5, training=True)"), Criterion.NONDETERMINISTIC),
    "rand_like": (model("return x + torch.rand_like(x)"), Criterion.NONDETERMINISTIC),
    "log_of_randn": (model("return torch.log(x)"), Criterion.NON_FINITE),
    "too_fast": (model("return torch.relu(x)", inputs="torch.randn(4)"), Criterion.TOO_FAST),
    "shape_error": (model("return x @ torch.randn(5, 7)"), Criterion.EAGER_ERROR),
    "no_get_inputs": (model("return x").replace("def get_inputs", "def get_other"), Criterion.LOAD_ERROR),
    "bad_import": (model("return x", extra="import not_a_module_xyz\n\n\n"), Criterion.LOAD_ERROR),
    "compile_differs": (model("return x * 2 if torch.compiler.is_compiling() else torch.relu(self.conv(x))",
                              init=CONV), Criterion.COMPILE_MISMATCH),
    "segfault": (model("os.kill(os.getpid(), signal.SIGSEGV)", extra="import os\nimport signal\n\n\n"),
                 Criterion.CRASH),
}


def _config(**overrides) -> FilterConfig:
    values = dict(device="cpu", min_ms=0.05, max_ms=5000.0, compile_backend="eager", workers=2, timeout_s=120.0,
                  min_runs=3, min_time_s=0.02, exclusive_timing=False)
    values.update(overrides)
    return FilterConfig(**values)


def _all_tasks() -> list[Task]:
    return [make_task(k, v) for k, v in GOOD.items()] + [make_task(k, v[0]) for k, v in EXPECTED.items()]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    folder = tmp_path_factory.mktemp("filter")
    tasks = write_tasks(folder / "tasks.jsonl", _all_tasks())
    report = filter_tasks(tasks, folder / "out", _config(), recheck=True)
    verdicts = {r.task_id: r for r in JsonlStore(folder / "out" / "results.jsonl", FilterResult).load()}
    return folder, report, verdicts


def test_each_criterion_drops_its_task(judged):
    _, _, verdicts = judged
    for task_id, (_, criterion) in EXPECTED.items():
        assert verdicts[task_id].criterion is criterion, (task_id, verdicts[task_id])
        assert not verdicts[task_id].kept


def test_good_tasks_are_kept_with_their_eager_time(judged):
    folder, report, verdicts = judged
    kept = JsonlStore(folder / "out" / "kept.jsonl", Task).load()
    assert sorted(t.id for t in kept) == sorted(GOOD)
    assert all(t.eager_ms is not None and t.eager_ms > 0.05 for t in kept)
    assert all(verdicts[k].compile_s is not None for k in GOOD)
    assert report.kept == len(GOOD) and report.dropped == len(EXPECTED)


def test_no_kept_task_lets_a_constant_pass(judged):
    folder, _, _ = judged
    import torch

    from cuda_agent.data_gen.loader import import_source

    for task in JsonlStore(folder / "out" / "kept.jsonl", Task).load():
        module = import_source(task.source)
        torch.manual_seed(0)
        out = module.Model(*module.get_init_inputs())(*module.get_inputs())
        for constant in (0.0, out.mean().item(), out.median().item()):
            assert not torch.allclose(out, torch.full_like(out, constant), atol=1e-2, rtol=1e-2)


def test_report_counts_histogram_and_throughput(judged):
    folder, report, verdicts = judged
    on_disk = json.loads((folder / "out" / "report.json").read_text())
    assert on_disk["kept"] == report.kept
    assert sum(report.by_criterion.values()) == report.dropped
    timed = sum(v.eager_ms is not None for v in verdicts.values())
    assert sum(b.count for b in report.eager_ms_histogram) == timed >= len(GOOD) + 1
    assert report.tasks_per_minute > 0 and report.processed == report.total
    assert report.recheck is not None and report.recheck.rechecked == len(GOOD)
    assert report.recheck.fraction == 1.0


def test_rerun_resumes_and_a_fresh_run_agrees(judged, tmp_path):
    folder, report, verdicts = judged
    again = filter_tasks(folder / "tasks.jsonl", folder / "out", _config())
    assert again.processed == 0 and again.by_criterion == report.by_criterion
    subset = write_tasks(tmp_path / "t.jsonl", [t for t in _all_tasks() if t.id in GOOD or t.id.startswith("const")])
    fresh = filter_tasks(subset, tmp_path / "out", _config())
    fresh_verdicts = {r.task_id: r for r in JsonlStore(tmp_path / "out" / "results.jsonl", FilterResult).load()}
    for task_id, verdict in fresh_verdicts.items():
        assert (verdict.kept, verdict.criterion) == (verdicts[task_id].kept, verdicts[task_id].criterion)
    assert fresh.kept == len(GOOD)


def test_window_bounds_are_configurable(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [make_task("good", GOOD["good_conv_relu"])])
    report = filter_tasks(tasks, tmp_path / "slow", _config(min_ms=0.0, max_ms=0.001, compile=False))
    assert report.by_criterion == {"too_slow": 1}
    assert FilterConfig(device="cuda").window_ms == (1.0, 100.0)


def test_a_failing_compile_is_a_compile_error(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [make_task("good", GOOD["good_conv_relu"])])
    report = filter_tasks(tasks, tmp_path / "out", _config(min_ms=0.0, compile_backend="no_such_backend"))
    assert report.by_criterion == {"compile_error": 1}


def test_a_hanging_task_times_out_without_stopping_the_run(tmp_path):
    hang = make_task("hang", model("import time; time.sleep(600); return x"))
    tasks = write_tasks(tmp_path / "t.jsonl", [hang, make_task("good", GOOD["good_conv_relu"])])
    report = filter_tasks(tasks, tmp_path / "out", _config(timeout_s=4.0, compile=False))
    verdicts = {r.task_id: r for r in JsonlStore(tmp_path / "out" / "results.jsonl", FilterResult).load()}
    assert verdicts["hang"].criterion is Criterion.TIMEOUT
    assert verdicts["good"].kept and report.kept == 1


@pytest.mark.slow
def test_inductor_compile_on_cpu(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [make_task("good", GOOD["good_conv_gelu_sum"])])
    report = filter_tasks(tasks, tmp_path / "out", _config(compile_backend="inductor", workers=1, timeout_s=300.0))
    assert report.kept == 1, report.by_criterion


@pytest.mark.ray
def test_ray_backend_on_a_local_cluster(tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        tasks = write_tasks(tmp_path / "t.jsonl", [make_task("good", GOOD["good_conv_relu"]),
                                                   make_task("zero", EXPECTED["const_zero"][0])])
        report = filter_tasks(tasks, tmp_path / "out", _config(compile=False), backend="ray")
    finally:
        ray.shutdown()
    assert report.backend == "ray" and report.kept == 1
    assert report.by_criterion == {"constant_output": 1}


@pytest.mark.gpu
def test_filter_on_gpu(tmp_path):
    tasks = write_tasks(tmp_path / "t.jsonl", [make_task("good", GOOD["good_conv_relu"]),
                                               make_task("zero", EXPECTED["const_zero"][0])])
    report = filter_tasks(tasks, tmp_path / "out", FilterConfig(device="cuda", min_ms=0.0, workers=1), recheck=True)
    assert report.kept == 1 and report.by_criterion == {"constant_output": 1}
    assert report.recheck is not None and report.recheck.fraction == 1.0

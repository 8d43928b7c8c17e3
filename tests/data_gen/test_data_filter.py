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
PARAM = CONV + "\n        self.w = nn.Parameter(torch.randn(16, 62, 62))"
TWO = "torch.randn(8, 3, 64, 64), torch.randn(8, 16, 62, 62)"


def model2(forward: str, init: str = CONV) -> str:
    """A task whose forward takes (x, y): x an image batch, y shaped like the convolution's output."""
    return model(forward, inputs=TWO, init=init).replace("def forward(self, x):", "def forward(self, x, y):")


# Honest tasks: each is the twin of a rule below (same shape of computation, nothing to game).
GOOD = {
    "good_conv_relu": model("return torch.relu(self.conv(x))", init=CONV),
    "good_conv_gelu_sum": model("return torch.nn.functional.gelu(self.conv(x)).sum(dim=1)", init=CONV),
    "good_scalar_sum": model("return self.conv(x).sum()", init=CONV),  # twin of scalar_near_constant
    "good_sigmoid": model("return torch.sigmoid(self.conv(x))", init=CONV),  # twin of sigmoid_near_constant
    "good_param_plus_x": model("return self.w + self.conv(x)", init=PARAM),  # twin of param_small_spread
    "good_two_inputs": model2("return self.conv(x) * y"),  # twin of dead_input
    "good_not_in_place": model("return self.conv(torch.relu(x))", init=CONV),  # twin of in_place_input
    # small values, but the evaluator's atol shrinks with the output's magnitude: no constant passes
    "good_softmax": model("return torch.softmax(self.conv(x).flatten(1), dim=1)", init=CONV),
}
EXPECTED = {
    "const_zero": (model("return x * 0"), Criterion.CONSTANT_OUTPUT),
    "const_value": (model("return torch.ones_like(x) * 3.0"), Criterion.CONSTANT_OUTPUT),
    "scalar_near_constant": (model("return self.conv(x).abs().mean() + 5.0", init=CONV), Criterion.CONSTANT_OUTPUT),
    "sigmoid_near_constant": (model("return torch.sigmoid(self.conv(x) * 1e-3)", init=CONV), Criterion.CONSTANT_OUTPUT),
    "same_for_all_inputs": (model("return self.w + 0.0 * x.sum()", init="self.w = nn.Parameter(torch.randn(256))"),
                            Criterion.INDISTINGUISHABLE),
    "param_small_spread": (model("return self.w + 1e-3 * self.conv(x)", init=PARAM), Criterion.INDISTINGUISHABLE),
    "dead_input": (model2("return self.conv(x) + 0.0 * y"), Criterion.DEAD_INPUT),
    "dead_relu_after_sigmoid": (model("return torch.relu(torch.sigmoid(self.conv(x)))", init=CONV),
                                Criterion.DEAD_OPERATOR),
    "dead_second_relu6": (model("return F.relu6(torch.abs(F.relu6(self.conv(x))))", init=CONV,
                                extra="import torch.nn.functional as F\n\n\n"), Criterion.DEAD_OPERATOR),
    "in_place_input": (model("x.relu_()\n        return self.conv(x)", init=CONV), Criterion.INPUT_MUTATION),
    "seeded_rng": (model("torch.manual_seed(0)\n        return self.conv(x) + torch.randn(16, 1, 1, device=x.device)",
                         init=CONV), Criterion.RNG_IN_FORWARD),
    "seed_only": (model("torch.manual_seed(0)\n        return self.conv(x)", init=CONV), Criterion.RNG_IN_FORWARD),
    "dropout": (model("return torch.nn.functional.dropout(x, 0.5, training=True)"), Criterion.RNG_IN_FORWARD),
    "rand_like": (model("return x + torch.rand_like(x)"), Criterion.RNG_IN_FORWARD),
    "log_of_randn": (model("return torch.log(x)"), Criterion.NON_FINITE),
    "too_fast": (model("return torch.relu(x)", inputs="torch.randn(4)"), Criterion.TOO_FAST),
    "shape_error": (model("return x @ torch.ones(5, 7)"), Criterion.EAGER_ERROR),
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
    """Independent of hack.py: simple constants and each draw's own output, judged by the harness's comparison."""
    folder, _, _ = judged
    import torch

    from cuda_agent.data_gen.loader import import_source
    from cuda_agent.sandbox_pool.harness.compare import compare_outputs

    for task in JsonlStore(folder / "out" / "kept.jsonl", Task).load():
        module = import_source(task.source)
        torch.manual_seed(0)
        net = module.Model(*module.get_init_inputs())
        outs = []
        for seed in range(5):
            torch.manual_seed(seed)
            with torch.no_grad():
                outs.append(net(*module.get_inputs()))
        first = outs[0].double()
        guesses = [first, torch.full_like(first, 0.0), torch.full_like(first, first.mean().item()),
                   torch.full_like(first, first.median().item()),
                   torch.full_like(first, (first.max().item() + first.min().item()) / 2)]
        for guess in guesses:
            assert any(compare_outputs([guess.float()], [o], 1e-2, 1e-2) is not None for o in outs), task.id


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
    chosen = ["const_zero", "scalar_near_constant", "param_small_spread", "dead_input", "dead_relu_after_sigmoid",
              "in_place_input", "seeded_rng", "rand_like"]
    tasks = write_tasks(tmp_path / "t.jsonl", [make_task("good", GOOD["good_conv_relu"]),
                                               make_task("good_two_inputs", GOOD["good_two_inputs"])]
                        + [make_task(k, EXPECTED[k][0]) for k in chosen])
    report = filter_tasks(tasks, tmp_path / "out", FilterConfig(device="cuda", min_ms=0.0, workers=2), recheck=True)
    verdicts = {r.task_id: r for r in JsonlStore(tmp_path / "out" / "results.jsonl", FilterResult).load()}
    for task_id in chosen:
        assert verdicts[task_id].criterion is EXPECTED[task_id][1], verdicts[task_id]
    assert report.kept == 2, verdicts
    assert report.recheck is not None and report.recheck.fraction == 1.0


STATEFUL = "self.conv = nn.Conv2d(3, 16, 3)\n        self.calls = 0"
LATE = "self.calls += 1\n        if self.calls > 12:\n            {action}\n        return torch.relu(self.conv(x))"


def test_a_crash_beside_a_hang_is_a_crash_not_a_timeout(tmp_path):
    """Both fail while timing, under the device's timing lock: the task waiting for the lock that the
    hanging task holds must not be charged for the wait."""
    hang = model(LATE.format(action="time.sleep(600)"), init=STATEFUL, extra="import time\n\n\n")
    crash = model(LATE.format(action="os.kill(os.getpid(), signal.SIGSEGV)"), init=STATEFUL,
                  extra="import os\nimport signal\n\n\n")
    tasks = write_tasks(tmp_path / "t.jsonl", [make_task("hang", hang), make_task("crash", crash)])
    filter_tasks(tasks, tmp_path / "out", _config(timeout_s=6.0, compile=False, exclusive_timing=True,
                                                  warmup_runs=5, min_runs=20, min_time_s=1.0))
    verdicts = {r.task_id: r for r in JsonlStore(tmp_path / "out" / "results.jsonl", FilterResult).load()}
    assert verdicts["hang"].criterion is Criterion.TIMEOUT, verdicts["hang"]
    assert verdicts["crash"].criterion is Criterion.CRASH, verdicts["crash"]
    assert "SIGSEGV" in verdicts["crash"].detail


def test_ablation_removes_operations_not_constants():
    from cuda_agent.data_gen.filter.ablation import ablations

    source = model("return torch.softmax(self.conv(x) * 2.0 - 1, dim=-1)", init=CONV)
    removed = [a.removed.split(" in ")[0] for a in ablations(source)]
    assert removed == ["torch.softmax", "Sub", "Sub", "Mult", "Mult", "self.conv"], removed
    assert all("dim=1" not in a.source for a in ablations(source))  # -1 is never turned into 1

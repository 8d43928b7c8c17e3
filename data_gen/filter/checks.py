"""The filter's checks, run inside one throw-away task process (see `isolation.py`).

Order (the first failure is the verdict): load -> eager run (no in-place write to an input, no
random numbers) -> finite -> deterministic -> no constant and no fixed tensor passes the
evaluator's comparison on every input draw (`hack.py`) -> every input matters -> every
operation of forward matters (`ablation.py`) -> eager time in the window -> torch.compile runs
and matches eager. Only the timing holds the device's timing lock; the other checks and
compilation do not, so other task processes can work while one times.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from cuda_agent.data_gen.filter.models import Criterion, FilterConfig, FilterResult
from cuda_agent.data_gen.loader import import_source
from cuda_agent.errors import ProblemError


class Rejected(Exception):
    """A failed check: carries the criterion (internal to the task process)."""

    def __init__(self, criterion: Criterion, detail: str, eager_ms: float | None = None) -> None:
        super().__init__(detail)
        self.criterion = criterion
        self.detail = detail[:2000]
        self.eager_ms = eager_ms


@contextlib.contextmanager
def device_lock(path: str | None) -> Iterator[None]:
    """An exclusive flock on `path` (released by the kernel even if the process is killed)."""
    if path is None:
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _flatten(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flatten(item)]
    raise Rejected(Criterion.EAGER_ERROR, f"forward returned {type(value).__name__}, not tensors")


def _close(a: Any, b: Any, atol: float, rtol: float) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return bool(torch.equal(a, b))
    return bool(torch.allclose(a, b, atol=atol, rtol=rtol))


def _all_close(xs: Sequence[Any], ys: Sequence[Any], atol: float, rtol: float) -> bool:
    return len(xs) == len(ys) and all(_close(x, y, atol, rtol) for x, y in zip(xs, ys))


def _to(value: Any, device: str) -> Any:
    import torch

    return value.to(device) if isinstance(value, torch.Tensor) else value


def _synchronizer(device: str) -> Callable[[], None]:
    import torch

    if device.startswith("cuda"):
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_ms(fn: Callable[[], Any], sync: Callable[[], None], config: FilterConfig) -> float:
    """Median wall time of `fn` in ms, with warm-up; stops early when clearly above the window."""
    for _ in range(config.warmup_runs):
        fn()
        sync()
    samples: list[float] = []
    too_slow_s = 3 * config.window_ms[1] / 1000
    while len(samples) < config.max_runs and (len(samples) < config.min_runs or sum(samples) < config.min_time_s):
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
        if len(samples) >= 2 and min(samples) > too_slow_s:
            break
    return statistics.median(samples) * 1000


class _TaskRun:
    """State of one task inside its process."""

    def __init__(self, source: str, config: FilterConfig, device: str) -> None:
        self.source = source
        self.config = config
        self.device = device
        self.sync = _synchronizer(device)
        self.module = self._load(source)
        self.model, self.inputs_a, self.inputs_b = self._instantiate()

    def _load(self, source: str) -> Any:
        try:
            return import_source(source)
        except ProblemError as exc:
            raise Rejected(Criterion.LOAD_ERROR, str(exc)) from exc

    def draw(self, seed: int) -> list[Any]:
        """The inputs of `get_inputs()` under `seed`, on the task's device."""
        import torch

        try:
            torch.manual_seed(seed)
            with torch.device(self.device):  # draw GPU-sized inputs on the GPU, not on a shared CPU
                return [_to(x, self.device) for x in self.module.get_inputs()]
        except (torch.OutOfMemoryError, MemoryError) as exc:
            raise Rejected(Criterion.OUT_OF_MEMORY, f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # the task's own code failed
            raise Rejected(Criterion.LOAD_ERROR, f"get_inputs() failed: {type(exc).__name__}: {exc}") from exc

    def build(self, module: Any) -> Any:
        """`module.Model(*get_init_inputs())` on the device, parameters seeded by the config's seed."""
        import torch

        torch.manual_seed(self.config.seed)
        with torch.device(self.device):
            return module.Model(*module.get_init_inputs()).to(self.device)

    def _instantiate(self) -> tuple[Any, list[Any], list[Any]]:
        import torch

        try:
            model = self.build(self.module)
        except (torch.OutOfMemoryError, MemoryError) as exc:
            raise Rejected(Criterion.OUT_OF_MEMORY, f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # the task's own code failed
            raise Rejected(Criterion.LOAD_ERROR, f"{type(exc).__name__}: {exc}") from exc
        return model, self.draw(self.config.seed), self.draw(self.config.seed + 1)

    def run(self, model: Any, inputs: Sequence[Any], criterion: Criterion = Criterion.EAGER_ERROR) -> list[Any]:
        return self._guard(lambda: model(*inputs), criterion)

    def _guard(self, call: Callable[[], Any], criterion: Criterion) -> list[Any]:
        import torch

        try:
            out = call()
            self.sync()
        except Rejected:
            raise
        except (torch.OutOfMemoryError, MemoryError) as exc:
            raise Rejected(Criterion.OUT_OF_MEMORY, f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # the task's own code failed
            raise Rejected(criterion, f"{type(exc).__name__}: {exc}") from exc
        return [t.detach().clone() for t in _flatten(out)]


def _check_finite(outputs: Sequence[Any]) -> None:
    import torch

    for out in outputs:
        if out.is_floating_point() and not bool(torch.isfinite(out).all()):
            raise Rejected(Criterion.NON_FINITE, "output holds NaN or Inf")


def _matches(out: Sequence[Any], ref: Sequence[Any], config: FilterConfig) -> bool:
    """The evaluator's own comparison (sandbox_pool/harness/compare.py)."""
    from cuda_agent.sandbox_pool.harness.compare import compare_outputs

    return compare_outputs(list(out), list(ref), config.atol, config.rtol) is None


def _probed_run(run: _TaskRun) -> list[Any]:
    """The first eager forward, under the RNG and in-place-write probes."""
    from cuda_agent.data_gen.filter.probes import probe_forward

    found: list[Any] = []

    def call() -> Any:
        out, probe = probe_forward(lambda: run.model(*run.inputs_a), run.inputs_a, run.device)
        found.append(probe)
        return out

    out_a = run._guard(call, Criterion.EAGER_ERROR)
    probe = found[0]
    if probe.mutated_inputs:
        raise Rejected(Criterion.INPUT_MUTATION, f"forward writes into input(s) {probe.mutated_inputs} in place")
    if probe.rng_ops or probe.rng_state_changed:
        what = ", ".join(sorted(set(probe.rng_ops))) or "the global random generator (manual_seed?)"
        raise Rejected(Criterion.RNG_IN_FORWARD, f"forward draws random numbers: {what}")
    return out_a


def _hack_checks(run: _TaskRun, out_a: list[Any], out_b: list[Any]) -> None:
    from cuda_agent.data_gen.filter.hack import find_hack

    c = run.config
    draws = [out_a, out_b]
    for index in range(2, c.draws):
        outputs = run.run(run.model, run.draw(c.seed + index))
        _check_finite(outputs)
        draws.append(outputs)
    if (hack := find_hack(draws, c.atol, c.rtol)) is not None:
        criterion = Criterion.CONSTANT_OUTPUT if hack.kind == "constant" else Criterion.INDISTINGUISHABLE
        raise Rejected(criterion, hack.detail)


def _dead_inputs(run: _TaskRun, out_a: list[Any]) -> None:
    import torch

    tensors = [i for i, x in enumerate(run.inputs_a) if isinstance(x, torch.Tensor)]
    if len(tensors) < 2:
        return  # a single input is judged by the hackability checks
    for i in tensors:
        mixed = list(run.inputs_a)
        mixed[i] = run.inputs_b[i]
        try:
            out = run.run(run.model, mixed)
        except Rejected:
            continue  # the other draw does not fit: the input's values matter to the shapes
        if _matches(out, out_a, run.config):
            raise Rejected(Criterion.DEAD_INPUT, f"input {i} of {len(run.inputs_a)} does not change the output: "
                                                 "replacing it by another draw stays within tolerance")


def _dead_operators(run: _TaskRun, out_a: list[Any], out_b: list[Any]) -> None:
    import torch

    from cuda_agent.data_gen.filter.ablation import ablations

    state = run.model.state_dict()
    for ablation in ablations(run.source, run.config.max_ablations):
        try:
            module = import_source(ablation.source)
            model = run.build(module)
            model.load_state_dict(state, strict=False)
            variant_a = run.run(model, run.inputs_a)
            variant_b = run.run(model, run.inputs_b)
        except Exception:  # noqa: BLE001 - the variant does not load or run: the operation matters
            continue
        if _matches(variant_a, out_a, run.config) and _matches(variant_b, out_b, run.config):
            raise Rejected(Criterion.DEAD_OPERATOR, f"removing `{ablation.removed}` (line {ablation.line}) leaves the "
                                                    "output within tolerance on two input draws")


def semantic_checks(run: _TaskRun) -> list[Any]:
    """Every check on what the eager model computes; returns its outputs on the first draw."""
    c = run.config
    out_a = _probed_run(run)
    _check_finite(out_a)
    again = run.run(run.model, run.inputs_a)
    if not _all_close(out_a, again, c.det_atol, c.det_rtol):
        raise Rejected(Criterion.NONDETERMINISTIC, "two runs on the same inputs differ")
    out_b = run.run(run.model, run.inputs_b)
    _check_finite(out_b)
    _hack_checks(run, out_a, out_b)
    _dead_inputs(run, out_a)
    _dead_operators(run, out_a, out_b)
    return out_a


def timing_check(run: _TaskRun) -> float:
    """The median eager time; raises when it is outside the window."""
    c = run.config
    eager_ms = time_ms(lambda: run.model(*run.inputs_a), run.sync, c)
    lo, hi = c.window_ms
    if eager_ms < lo:
        raise Rejected(Criterion.TOO_FAST, f"eager {eager_ms:.4g} ms < {lo} ms", eager_ms)
    if eager_ms > hi:
        raise Rejected(Criterion.TOO_SLOW, f"eager {eager_ms:.4g} ms > {hi} ms", eager_ms)
    return eager_ms


def compile_check(run: _TaskRun, reference: Sequence[Any]) -> float:
    """Compile the model, run it once on the first draw, compare with eager; returns the seconds taken."""
    import torch

    c = run.config
    start = time.perf_counter()
    try:
        compiled = torch.compile(run.model, backend=c.compile_backend, mode=c.compile_mode)
    except Exception as exc:  # the task's own code failed to compile
        raise Rejected(Criterion.COMPILE_ERROR, f"{type(exc).__name__}: {exc}") from exc
    out = run.run(compiled, run.inputs_a, Criterion.COMPILE_ERROR)
    elapsed = time.perf_counter() - start
    if not _matches(out, reference, c):
        raise Rejected(Criterion.COMPILE_MISMATCH, "compiled output differs from eager beyond tolerance")
    return elapsed


def _setup(config: FilterConfig, device: str) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 baselines, TF32 off (precision policy 'paper')
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    if device == "cpu":
        torch.set_num_threads(config.threads_per_worker)
    else:
        torch.cuda.set_device(device)
    with contextlib.suppress(Exception):  # inductor may be absent in minimal builds
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = config.compile_threads


def evaluate(task_id: str, source: str, config: FilterConfig, device: str, lock_path: str | None,
             notify: Callable[[str], None] = lambda phase: None) -> FilterResult:
    """Run every check on one task in this process; never raises for the task's own failures.

    `notify(phase)` tells the parent when the task starts waiting for the device's timing lock
    ("waiting_for_lock"), gets it ("locked") and releases it ("unlocked").
    """
    import torch

    start = time.perf_counter()
    result = FilterResult(task_id=task_id, kept=False, device=device, host=socket.gethostname())
    _setup(config, device)
    try:
        with torch.no_grad():
            run = _TaskRun(source, config, device)
            reference = semantic_checks(run)
            run.inputs_b = []  # free the second draw before timing and compiling
            notify("waiting_for_lock")  # the parent does not count the wait against the task's timeout
            with device_lock(lock_path):
                notify("locked")
                result.eager_ms = timing_check(run)
            notify("unlocked")
            if config.compile:
                result.compile_s = compile_check(run, reference)
        result.kept = True
    except Rejected as rejected:
        result.criterion, result.detail = rejected.criterion, rejected.detail
        result.eager_ms = result.eager_ms if rejected.eager_ms is None else rejected.eager_ms
    result.duration_s = time.perf_counter() - start
    return result


def child_main(connection: Any, task_id: str, source: str, config_json: str, device: str,
               lock_path: str | None) -> None:
    """Entry point of a task process: evaluate, send the verdict as JSON, exit."""
    os.setpgrp()  # the parent kills the whole group on timeout (compiler subprocesses included)
    config = FilterConfig.model_validate_json(config_json)
    if config.memory_limit_mb and device == "cpu":
        import resource

        limit = config.memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = evaluate(task_id, source, config, device, lock_path,
                      notify=lambda phase: connection.send(("phase", phase)))
    connection.send(result.model_dump_json())
    connection.close()

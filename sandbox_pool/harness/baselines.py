"""Eager and torch.compile baselines: measured once per task, device and software stack.

Baselines run in a reference child with exactly the candidate's timing protocol. Each is
timed in blocks of `n_sets` calls until the median's 95% confidence interval is within
+-CI_TARGET of the median, or MAX_ROUNDS blocks / MAX_TIMING_S seconds have passed (then a
warning travels with the baselines into every result that uses them). They are cached on disk
as JSON keyed by the problem's hash, the device's name, the software stack (torch, CUDA,
driver, triton, Python), the precision policy, the protocol version and the timing settings
(timed calls, warm-up, CI target, cap).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import InfraError
from cuda_agent.sandbox_pool.harness.models import TimingStats
from cuda_agent.sandbox_pool.harness.problem import Problem
from cuda_agent.sandbox_pool.harness.protocol import ChildSpec
from cuda_agent.sandbox_pool.harness.reference import timing_draws
from cuda_agent.sandbox_pool.harness.runner import ChildEnded, ChildProcess, ChildTimeout, Zygote
from cuda_agent.sandbox_pool.harness.stats import relative_half_width, timing_stats
from cuda_agent.sandbox_pool.harness.window_check import CHECK_CALLS, CHECK_CI_TARGET, CHECK_MAX_S, CHECK_ROUNDS

logger = logging.getLogger(__name__)

PROTOCOL_VERSION = "7"  # 4: the input mix of harness/inputs.py's seven distributions; CI-driven repeats;
#                          5: the children build the model themselves, its weights drawn on the device;
#                          6: CPU children keep the memory they free (child/heap.py: no fresh pages per call);
#                          7: non-contiguous outputs are copied densely inside the timed window (timing.materialise)
BASELINE_SEED = 1234
CI_TARGET = 0.02
"""Stop timing a baseline once the half-width of its median's 95% CI is at most 2% of the median."""
MAX_ROUNDS = 10
"""At most this many blocks of `n_sets` timed calls per baseline."""
MAX_TIMING_S = 60.0
"""At most this long timing one baseline (whole blocks; warm-up and torch.compile not counted)."""


class Baselines(BaseModel):
    """The eager and torch.compile timings of one problem on one device and software stack."""

    model_config = ConfigDict(extra="forbid")

    eager: TimingStats
    torch_compile: TimingStats | None
    compile_error: str | None = None
    key: str
    warnings: list[str] = Field(default_factory=list, description="Baselines whose CI stayed wider than CI_TARGET.")
    stack: str = Field("", description="Software stack measured on (software_stack()).")


@functools.lru_cache(maxsize=4)
def software_stack(device: str = "cpu") -> str:
    """torch, CUDA, driver, triton and Python versions: what a baseline's speed depends on besides the device."""
    parts = [f"torch={torch.__version__}", f"python={platform.python_version()}"]
    try:
        parts.append(f"triton={importlib.metadata.version('triton')}")
    except importlib.metadata.PackageNotFoundError:
        parts.append("triton=none")
    if device == "cuda":
        parts += [f"cuda={torch.version.cuda}", f"driver={_driver_version()}"]
    return ",".join(parts)


def _driver_version() -> str:
    try:  # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..."
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        return next((w for w in first.split() if w[:1].isdigit() and "." in w), first.strip())
    except (OSError, IndexError):
        return "unknown"


def baseline_key(problem: Problem, device_name: str, torch_version: str, tf32: bool, n_sets: int, *,
                 device: str = "cpu", warmup: int = 3) -> str:
    """Cache key: problem, device, software stack, precision and every timing setting."""
    parts = [problem.sha256, device_name, torch_version, software_stack(device), f"tf32={tf32}", PROTOCOL_VERSION,
             f"calls={n_sets}", f"warmup={max(warmup, 2)}", f"ci={CI_TARGET}", f"rounds={MAX_ROUNDS}",
             f"cap={MAX_TIMING_S}"]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def ci_warning(name: str, stats: TimingStats) -> str | None:
    """A warning when a baseline's CI stayed wider than the target (rewards then use its lower end)."""
    width = relative_half_width(stats.samples_us)
    if width <= CI_TARGET:
        return None
    return (f"{name} baseline is noisy: the 95% CI of its median is +-{width:.1%} after {len(stats.samples_us)} "
            f"timed calls (target +-{CI_TARGET:.0%}); speed-ups are judged against its lower end "
            f"({stats.ci_low_us:.1f} us, median {stats.median_us:.1f} us)")


class BaselineCache:
    """Baselines on disk, one JSON file per key."""

    def __init__(self, root: Path) -> None:
        self.root = root / "baselines"
        self.root.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> Baselines | None:
        path = self.root / f"{key}.json"
        if not path.exists():
            return None
        try:
            return Baselines.model_validate_json(path.read_text())
        except ValueError:
            return None

    def put(self, baselines: Baselines) -> None:
        tmp = self.root / f"{baselines.key}.tmp"
        tmp.write_text(baselines.model_dump_json())
        tmp.replace(self.root / f"{baselines.key}.json")


class BaselineChildren:
    """The eager and torch.compile children of one problem's baselines, spawned before their timing.

    Until `finish` lets them go they only set themselves up (fork, imports; a compile child imports its
    compiler, seconds of CPU work), nothing on the device, so a pass may spawn the next problem's
    children while this one's are timed. On cuda the compile child is spawned with the eager one and
    imports while the eager child is timed; it is let go only when the eager child has ended, so the two
    never share the device. On the CPU it is spawned after the eager child ends (its imports would share
    the cores the eager calls are timed on). `compile_cache_dir`: a trusted inductor/triton cache shared
    with other baseline children (one that `warm_compile` filled makes the compile child's torch.compile
    a cache hit); None: private."""

    def __init__(self, problem: Problem, zygote: Zygote, *, device: str, device_index: int, tf32: bool, n_sets: int,
                 warmup: int, key: str, compile_cache_dir: str | None = None) -> None:
        self.key, self.device = key, device
        self.work = tempfile.mkdtemp(prefix="cuda_agent_baseline_")
        self._spawned: list[ChildProcess] = []
        self._spawn_error: BaseException | None = None

        def child(compiled: bool) -> ChildProcess:
            return _reference_child(zygote, problem, self.work, device, device_index, tf32, n_sets, warmup, compiled,
                                    compile_cache_dir if compiled else None)

        self._child = child
        try:
            self._spawned.append(child(False))
            if device == "cuda":
                self._spawned.append(child(True))
        except (InfraError, OSError) as exc:  # reported by finish(), for this problem only
            self._spawn_error = exc

    async def finish(self, timeout_s: float) -> Baselines:
        """Time the eager child, then the compile child; InfraError when the eager baseline fails."""
        if self._spawn_error is not None:
            raise self._spawn_error
        eager = await _timed(self._spawned[0], timeout_s)
        if isinstance(eager, str):
            raise InfraError(f"eager baseline failed: {eager}")
        if len(self._spawned) == 1:
            self._spawned.append(self._child(True))
        compiled = await _timed(self._spawned[1], timeout_s)
        warnings = [w for w in (ci_warning("eager", eager),
                                None if isinstance(compiled, str) else ci_warning("torch.compile", compiled)) if w]
        for warning in warnings:
            logger.warning(warning)
        stack = software_stack(self.device)
        if isinstance(compiled, str):
            logger.warning("torch.compile baseline failed (%s); compile speed-up will be unavailable", compiled)
            return Baselines(eager=eager, torch_compile=None, compile_error=compiled, key=self.key, warnings=warnings,
                             stack=stack)
        return Baselines(eager=eager, torch_compile=compiled, key=self.key, warnings=warnings, stack=stack)

    def close(self) -> None:
        """Kill the children (finished or not) and remove their work folder."""
        for child in self._spawned:
            child.kill()
        shutil.rmtree(self.work, ignore_errors=True)


async def measure(problem: Problem, zygote: Zygote, *, device: str, device_index: int, tf32: bool, n_sets: int, warmup: int,
                  key: str, timeout_s: float, compile_cache_dir: str | None = None) -> Baselines:
    """Time the reference eagerly and under torch.compile in fresh reference children (`BaselineChildren`)."""
    children = BaselineChildren(problem, zygote, device=device, device_index=device_index, tf32=tf32, n_sets=n_sets,
                                warmup=warmup, key=key, compile_cache_dir=compile_cache_dir)
    try:
        return await children.finish(timeout_s)
    finally:
        children.close()


async def warm_compile(problem: Problem, zygote: Zygote, *, device: str, device_index: int, tf32: bool, warmup: int,
                       compile_cache_dir: str, timeout_s: float) -> str | None:
    """Fill `compile_cache_dir` with the torch.compile artefacts `measure` will need for `problem`
    (the same child, inputs and settings as its compile child, with one timed call); None, or why not.

    Its times are not used, so several may share the device and the CPUs; the timed pass then loads
    the compiled graph and kernels from the cache instead of compiling."""
    work = tempfile.mkdtemp(prefix="cuda_agent_warm_")
    try:
        done = await _time_reference(zygote, problem, work, device, device_index, tf32, 1, warmup, True, timeout_s,
                                     compile_cache_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return done if isinstance(done, str) else None


async def _time_reference(zygote: Zygote, problem: Problem, work: str, device: str, device_index: int, tf32: bool, n_sets: int,
                          warmup: int, compiled: bool, timeout_s: float,
                          compile_cache_dir: str | None = None) -> TimingStats | str:
    child = _reference_child(zygote, problem, work, device, device_index, tf32, n_sets, warmup, compiled, compile_cache_dir)
    try:
        return await _timed(child, timeout_s)
    finally:
        child.kill()


class EagerCheck:
    """The window check's reference child (window_check.py), spawned ahead of its timing.

    `ready` waits while it sets itself up (fork, imports, on cuda its CUDA context: ~0.3 s or more) with the device
    shared, so the caller's exclusive window holds only `time`: blocks of CHECK_CALLS eager calls until
    CHECK_CI_TARGET, CHECK_ROUNDS blocks or CHECK_MAX_S."""

    def __init__(self, problem: Problem, zygote: Zygote, *, device: str, device_index: int, tf32: bool,
                 warmup: int) -> None:
        self.work = tempfile.mkdtemp(prefix="cuda_agent_window_")
        try:
            self.child = _reference_child(zygote, problem, self.work, device, device_index, tf32, CHECK_CALLS, warmup,
                                          False, max_timing_s=CHECK_MAX_S, ci_target=CHECK_CI_TARGET,
                                          rounds=CHECK_ROUNDS)
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            raise

    async def ready(self, timeout_s: float) -> str | None:
        """None once the child has set itself up; else why it has not."""
        message = await _until(self.child, "ready", timeout_s)
        if isinstance(message, dict):
            return None
        return "timed out setting up" if message == "timed out" else message

    async def time(self, timeout_s: float) -> TimingStats | str:
        """The eager reference's timing, now (the caller holds the device exclusive), or why it has none."""
        return await _timed(self.child, timeout_s)

    def close(self) -> None:
        self.child.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def _reference_child(zygote: Zygote, problem: Problem, work: str, device: str, device_index: int, tf32: bool, n_sets: int,
                     warmup: int, compiled: bool, compile_cache_dir: str | None = None, *,
                     max_timing_s: float = MAX_TIMING_S, ci_target: float = CI_TARGET,
                     rounds: int = MAX_ROUNDS) -> ChildProcess:
    """A reference child, spawned: it sets itself up (a compile child also imports its compiler) and
    waits for `_timed` to let it go. It times blocks of `n_sets` calls until `ci_target`, `rounds` blocks
    or `max_timing_s`."""
    spec = ChildSpec(role="reference", device=device, device_index=device_index, work_dir=work,
                     problem_src=problem.source, compile_reference=compiled, tf32=tf32,
                     timing_draws=timing_draws(BASELINE_SEED, n_sets * rounds),
                     warmup=max(warmup, 2), isolate=False,
                     ci_target=ci_target, min_timed_calls=n_sets, max_timing_s=max_timing_s,
                     compile_cache_dir=compile_cache_dir, build_on_device=True, init_seed=BASELINE_SEED)
    return ChildProcess(zygote, spec)


async def _timed(child: ChildProcess, timeout_s: float) -> TimingStats | str:
    """Let a spawned reference child go and wait for its timing (or why it has none)."""
    child.go()
    message = await _until(child, "timing", timeout_s)
    # a trusted child (the problem's code only): its timing needs no checking
    return timing_stats(message["samples_us"]) if isinstance(message, dict) else message


async def _until(child: ChildProcess, event: str, timeout_s: float) -> dict | str:
    """A trusted reference child's next `event` message, or why none came (its error, a timeout, its end)."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            message = await child.receive(deadline)
            if message.get("event") == event:
                return message
            if message.get("event") == "error":
                return f"{message['kind']}: {message['message']}"
    except ChildTimeout:
        return "timed out"
    except ChildEnded as exc:
        return str(exc)

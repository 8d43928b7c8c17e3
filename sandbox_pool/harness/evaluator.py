"""The evaluation pipeline: static check -> compile -> verify -> profile -> reward.

An `Evaluator` is a trusted worker for one device. It owns a forkserver (torch preloaded,
CUDA not initialised) from which every candidate gets a fresh, hardened child process; the
reference, its outputs and the comparison stay in the worker.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import platform
import shutil
import time
from pathlib import Path
from collections.abc import Coroutine
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import DeviceMemoryError, InfraError, ProblemError
from cuda_agent.sandbox_pool.harness import baselines as baseline_mod
from cuda_agent.sandbox_pool.harness import device_memory, window_check
from cuda_agent.sandbox_pool.harness.check_ahead import CheckAhead
from cuda_agent.sandbox_pool.harness.compiler import BuildResult, build_extension, default_cache_dir
from cuda_agent.sandbox_pool.harness.compiler.symbols import check_object_symbols
from cuda_agent.sandbox_pool.harness.child.hardening import make_undumpable
from cuda_agent.sandbox_pool.harness.early_child import EarlyChild, candidate_spec, private_copy
from cuda_agent.sandbox_pool.harness.gate import DeviceGate, Lease, Preempted
from cuda_agent.sandbox_pool.harness.models import (
    EvalJob,
    EvalResult,
    EvalStatus,
    PrecisionPolicy,
    Receipt,
    StageOutcome,
    TimingStats,
)
from cuda_agent.sandbox_pool.harness.output_buffer import OutputRegion, region_bytes
from cuda_agent.sandbox_pool.harness.problem import Problem, load_problem
from cuda_agent.sandbox_pool.harness.reference import PreparedReference
from cuda_agent.sandbox_pool.harness.preparation import ReferenceAhead, draw_seed, prepare_reference
from cuda_agent.sandbox_pool.harness.runner import ChildProcess, Zygote
from cuda_agent.sandbox_pool.harness.session import CandidateSession, SessionSetting
from cuda_agent.sandbox_pool.harness.static_check import check_candidate
from cuda_agent.sandbox_pool.harness.verdict import fail, finish
from cuda_agent.sandbox_pool.harness.workdir import new_work_folder

logger = logging.getLogger(__name__)

HARNESS_VERSION = "1"

NEIGHBOUR_SENSITIVE = frozenset({EvalStatus.CRASH, EvalStatus.LOAD_ERROR, EvalStatus.TIMEOUT})
"""Verdicts another evaluation on the same device could have caused (its memory, its share of the
device): reached while other children were alive, they are confirmed by a solo re-run (gate.py)."""
SHARED_ATTEMPTS = 3
"""Attempts of one evaluation that other evaluations preempt before it runs solo."""


class EvaluatorConfig(BaseModel):
    """Configuration of one trusted evaluation worker."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field("cpu", description="'cpu' or 'cuda'.")
    device_index: int = Field(0, ge=0, description="GPU index (cuda only).")
    cache_dir: Path | None = Field(None, description="Compile and baseline cache; default $CUDA_AGENT_CACHE or ~/.cache/cuda_agent.")
    isolate: bool = Field(True, description="Run candidates in a user+network namespace.")
    cpu_memory_limit_mb: int = Field(16384, description="Address-space limit of a CPU candidate child.")
    baseline_timeout_s: float = Field(900.0, description="Limit for measuring one baseline (torch.compile included).")
    pipeline_depth: int = Field(
        1, ge=1, le=32, description="Evaluations in flight on this device at once: their reference preparation, "
        "draws, loading, trials and warm-up share the device; clock calibration and timed calls have it alone "
        "(harness/gate.py). 1 = one evaluation at a time.")
    preempt_after_s: float = Field(
        2.0, gt=0, description="A child step that keeps another evaluation's timed calls waiting this long is "
        "stopped and its evaluation re-run solo.")
    window_check: bool = Field(
        False, description="Time the eager reference again after a correct candidate and refuse (infra_error) a "
        "reward timed under a load its cached baselines were not (harness/window_check.py). Off by "
        "default: a pool's own concurrent evaluations on shared cores are such a load, not yet kept out.")


def device_gate(config: EvaluatorConfig) -> DeviceGate:
    """The gate of `config`'s device: on a GPU it admits children by memory (device_memory.py)."""
    cuda = config.device == "cuda" and torch.cuda.is_available()
    return DeviceGate(config.preempt_after_s,
                      memory_budget=device_memory.children_budget(config.device_index) if cuda else None)


class Evaluator:
    """A trusted worker. Use ``async with Evaluator(cfg) as ev: await ev.evaluate(job)``."""

    def __init__(self, config: EvaluatorConfig | None = None, gate: DeviceGate | None = None,
                 zygote: Zygote | None = None) -> None:
        """`zygote`: one already launched (`Zygote.launch`) for this device, adopted and closed with us."""
        self.config = config or EvaluatorConfig()
        self.cache_dir = Path(self.config.cache_dir or default_cache_dir())
        self.baseline_cache = baseline_mod.BaselineCache(self.cache_dir)
        # Who uses the device when; shared by every evaluator of one device (a worker passes its own).
        self.gate = gate or device_gate(self.config)
        self._call_bytes: dict[str, int] = {}  # per problem: one call's inputs and outputs, once prepared here
        self._slots = asyncio.Semaphore(self.config.pipeline_depth)
        self.active = 0
        self._started = False
        self.zygote = zygote or Zygote(cuda=self.config.device == "cuda")

    async def start(self) -> None:
        if not self._started:
            make_undumpable()
            await asyncio.to_thread(self.zygote.start)
            self._started = True

    async def close(self) -> None:
        self._started = False
        self.zygote.close()

    async def __aenter__(self) -> "Evaluator":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def device(self) -> str:
        return "cpu" if self.config.device == "cpu" else f"cuda:{self.config.device_index}"

    async def evaluate(self, job: EvalJob, build: "BuildResult | PendingBuild | None" = None,
                       ahead: "ReferenceAhead | None" = None) -> EvalResult:
        """Evaluate one job. Candidate failures are results; harness failures are INFRA_ERROR results.

        `ahead`: this job's reference, already being prepared (`prepare_ahead`); its first attempt uses it."""
        try:
            await self.start()
            if job.device != self.config.device:
                raise InfraError(f"job for device {job.device!r} sent to a {self.config.device!r} evaluator")
            started = time.monotonic()
            async with self._slots:  # pipeline_depth evaluations at once; the gate decides who uses the device
                self.active += 1
                try:
                    result = await self._attempts(job, build, ahead)
                finally:
                    self.active -= 1
                    if not self.active:  # idle: the device's memory back for other processes (neighbours, children)
                        self.release_cached_memory()
        finally:
            if ahead is not None:
                await ahead.discard()  # not taken (a compile error, a rejected candidate): its work goes
        result.wall_s = time.monotonic() - started
        return result

    def prepare_ahead(self, job: EvalJob, work: str | None = None, child: EarlyChild | None = None) -> "ReferenceAhead":
        """Start preparing `job`'s reference now, before `evaluate` (the one-shot path: while the forkserver
        boots and the candidate compiles, so verification finds it done). Pass it to `evaluate`.
        `work`, `child`: the work folder and the candidate child the one-shot path started in it (early_child.py)."""
        return ReferenceAhead(self.gate, self.device, job, work=work, child=child)

    async def _attempts(self, job: EvalJob, build: "BuildResult | PendingBuild | None",
                        ahead: "ReferenceAhead | None" = None) -> EvalResult:
        """Run the job sharing the device; re-run it solo when sharing could have decided its verdict."""
        solo, notes = False, []
        for attempt in range(1, SHARED_ATTEMPTS + 2):
            result = EvalResult(status=EvalStatus.OK, precision_policy=job.options.precision_policy, device=job.device)
            result.receipt = self._receipt(job)
            lease, run = self.gate.lease(), None
            try:
                if solo:
                    await lease.acquire_solo()
                    self.release_cached_memory()  # a re-run after an out-of-memory finds what this process cached
                run = _Run(self, job, result, lease, ahead if attempt == 1 else None)
                await run.run(build)
            except DeviceMemoryError as exc:
                if solo:
                    fail(result, EvalStatus.INFRA_ERROR, f"out of device memory, alone on the device: {exc}")
                    break
                # not the candidate's doing (raised before its code was loaded, session.py): wait for memory,
                # counting more for the task
                self.expect_more_memory(job)
                self.release_cached_memory()
                solo = attempt >= SHARED_ATTEMPTS
                notes.append(f"out of device memory while sharing the device ({_first_line(exc)}): "
                             + ("re-run solo" if solo else "waits for memory, counting twice the task's calls"))
                continue
            except Preempted as exc:
                solo = exc.solo_next or attempt >= SHARED_ATTEMPTS
                notes.append("stopped: " + ("a child step held up another evaluation's timed calls" if exc.solo_next
                                            else "another evaluation needed the device to itself"))
                continue
            except (InfraError, ProblemError, OSError, RuntimeError) as exc:
                if lease.overlapped and not solo:  # possibly a neighbour's doing (e.g. device memory)
                    notes.append(f"{type(exc).__name__} while sharing the device ({_first_line(exc)}): re-run solo")
                    solo = True
                    continue
                if not isinstance(exc, (InfraError, ProblemError, OSError)):
                    raise
                logger.exception("infrastructure failure while evaluating %s", job.task_id)
                fail(result, EvalStatus.INFRA_ERROR, f"{type(exc).__name__}: {exc}")
            finally:
                await lease.close()
            clock_disagreed = run is not None and run.neighbour_sensitive
            if not solo and lease.overlapped and (result.status in NEIGHBOUR_SENSITIVE or clock_disagreed):
                what = "the timer's disagreement" if clock_disagreed else result.status.value
                notes.append(f"{what} while other evaluations shared the device: re-run solo")
                solo = True
                continue
            break
        if notes:
            device = result.stages.setdefault("device", StageOutcome(ran=True, ok=True))
            device.log = "; ".join(notes) + ("; this result is from a solo run" if solo else "")
            if result.status is EvalStatus.INFRA_ERROR:  # what ran out, and what was tried, where the user reads
                result.error = f"{result.error} (before: {'; '.join(notes)})"
        return result

    def child_need(self, problem: Problem) -> int:
        """The estimated device memory of a child evaluating `problem` (0 on a CPU: no admission by memory)."""
        if self.config.device != "cuda" or not torch.cuda.is_available():
            return 0
        return device_memory.child_need(device_memory.device_total(self.config.device_index),
                                        self._call_bytes.get(problem.sha256, 0))

    def learn_call_bytes(self, problem: Problem, prepared: PreparedReference) -> None:
        self._call_bytes[problem.sha256] = max(self._call_bytes.get(problem.sha256, 0),
                                               prepared.input_nbytes + prepared.output_nbytes)

    def expect_more_memory(self, job: EvalJob) -> None:
        """A child of `job`'s task ran out of device memory beside others: its children count twice the call
        bytes from now on, so that the gate admits fewer beside them."""
        key = hashlib.sha256(job.problem_src.encode()).hexdigest()  # Problem.sha256
        self._call_bytes[key] = 2 * max(self._call_bytes.get(key, 0), 1 << 20)

    def release_cached_memory(self) -> None:
        """On cuda, the caching allocator's unused blocks given back to the device (tensors in use stay)."""
        if self.config.device == "cuda" and torch.cuda.is_available():
            with torch.cuda.device(self.config.device_index):
                torch.cuda.empty_cache()

    def _receipt(self, job: EvalJob) -> Receipt:
        files = json.dumps(job.files, sort_keys=True).encode()
        if self.config.device == "cuda" and torch.cuda.is_available():
            name, driver = torch.cuda.get_device_name(self.config.device_index), f"cuda {torch.version.cuda}"
        else:
            name, driver = _cpu_name(), "n/a"
        return Receipt(device_name=name, driver=driver, torch_version=torch.__version__,
                       problem_sha256=hashlib.sha256(job.problem_src.encode()).hexdigest(),
                       candidate_sha256=hashlib.sha256(files).hexdigest(), harness_version=HARNESS_VERSION)


def _first_line(exc: BaseException, limit: int = 400) -> str:
    """An exception's first line, shortened: what ran out, for a note that the result carries."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


OVERLAP_MIN_CPUS = 8
"""CPUs this process may use for `overlap_baselines`: the compiler's processes (one per unit: a few)
beside the baseline child's launching thread and torch.compile's inductor workers, none starved."""


def overlap_baselines(device: str, *, profile: bool, compiling: bool, cpus: int | None = None) -> bool:
    """Whether a baseline cache miss is measured while the candidate compiles, rather than after
    its verification (`_Run.run`).

    Only on cuda: there the compile is CPU work and the baselines' timed calls need the device,
    which they hold solo (nobody else holds it during this run's compile). On cpu the compiler's
    processes would share the cores the baselines are timed on and inflate them (an honest baseline
    is never inflated: issue 12 item 4), so cpu keeps the sequential order. On cuda the
    host still launches each timed call, so only with `OVERLAP_MIN_CPUS` usable CPUs (`cpus`,
    default: this process's affinity) is a launch never kept waiting by the compiler. Only when the
    run profiles, and only when a compile is still to come in this run: a build made elsewhere (the
    pool's compile workers) leaves nothing to overlap. A candidate the static check rejects never
    gets here (`_Run.run` checks first)."""
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    return device == "cuda" and profile and compiling and cpus >= OVERLAP_MIN_CPUS


class PendingBuild:
    """A compile already under way, handed to `Evaluator.evaluate` as its build: the one-shot path
    starts it first, so the evaluator's start (forkserver, CUDA) and, on cuda, a baseline
    measurement (`overlap_baselines`) run while it compiles."""

    def __init__(self, build: Coroutine[Any, Any, BuildResult]) -> None:
        self.started = time.monotonic()
        self.task: asyncio.Task[BuildResult] = asyncio.ensure_future(build)

    async def result(self) -> BuildResult | None:
        """The build; None when building raised (the evaluator builds again and reports the failure)."""
        await asyncio.wait({self.task})  # not cancelled with its awaiter: a re-run attempt awaits it again
        if self.task.cancelled() or self.task.exception() is not None:
            return None
        return self.task.result()

    async def settle(self) -> None:
        """Wait for the build to end (it lands in the build cache; no compiler is left running)."""
        await asyncio.wait({self.task})
        if not self.task.cancelled():
            self.task.exception()  # retrieved: a failure was reported (or is not needed)


class _Run:
    """One evaluation, as a sequence of named stages."""

    def __init__(self, evaluator: Evaluator, job: EvalJob, result: EvalResult, lease: Lease,
                 ahead: "ReferenceAhead | None" = None) -> None:
        self.ev = evaluator
        self.lease = lease
        self.job = job
        self.opts = job.options
        self.result = result
        self.atol, self.rtol = self.opts.tolerances()
        self.ahead = ahead
        self.seed = ahead.seed if ahead is not None else draw_seed(self.opts.seed)
        self.result.receipt.seed = self.seed
        self.neighbour_sensitive = False  # a verdict other evaluations on the device could have caused
        self.check_ahead: CheckAhead | None = None  # the window check's child, started beside verification

    @property
    def window_checked(self) -> bool:
        """Whether this evaluation's cached baselines are checked in its window (window_check.py)."""
        return self.ev.config.window_check and self.job.device in window_check.DEVICES

    def stage(self, name: str, **fields: Any) -> StageOutcome:
        outcome = StageOutcome(ran=True, **fields)
        self.result.stages[name] = outcome
        return outcome

    async def run(self, build: "BuildResult | PendingBuild | None") -> None:
        """static check -> compile -> verify and time -> baselines; on cuda, a baseline cache miss is
        measured during the compile instead (`overlap_baselines`)."""
        self.t0 = time.monotonic()
        if not self.static_check():
            return  # a rejected candidate starts nothing: no compile, no baselines
        problem: Problem | None = None
        early: asyncio.Task[baseline_mod.Baselines] | None = None
        if overlap_baselines(self.job.device, profile=self.opts.profile, compiling=not isinstance(build, BuildResult)):
            try:
                problem = load_problem(self.job.problem_src)
            except ProblemError:
                pass  # reported where the sequential order reports it (after the compile)
            else:
                early = self.start_baselines(problem)
                if early is not None and self.ahead is not None:
                    self.ahead.drop_child()  # the baselines hold the device alone: no other child runs meanwhile
        try:
            await self._stages(build, problem, early)
        except BaseException:  # infrastructure failure, preemption, cancellation: the measurement is abandoned
            if early is not None and not early.done():
                early.cancel()
            raise
        finally:
            if self.check_ahead is not None:  # not needed (no reward to decide) or not used
                await self.check_ahead.close()
            if early is not None:
                # After a failed compile (or verification) a measurement already started goes on to
                # the cache: the task's next candidate needs it, and no child is left behind.
                await asyncio.wait({early})
                if not early.cancelled() and early.exception() is not None:
                    logger.warning("baselines measured during the compile failed: %s", early.exception())

    async def _stages(self, build: "BuildResult | PendingBuild | None", problem: Problem | None,
                      early: "asyncio.Task[baseline_mod.Baselines] | None") -> None:
        """The stages after the static check (`run`)."""
        started: float | None = None if isinstance(build, BuildResult) else time.monotonic()  # None: built elsewhere
        if isinstance(build, PendingBuild):
            started, build = build.started, await build.result()
        build = await self.compile(build)
        if started is not None and "compile" in self.result.stages:
            self.result.stages["compile"].started_s = started - self.t0
        if build is None:
            return
        problem = problem or load_problem(self.job.problem_src)
        if early is not None:
            await asyncio.wait({early})  # the baselines hold the device alone until they end
        verify_started = time.monotonic()
        self.check_ahead = self.start_check_ahead(problem, early)
        ok = await self.verify_and_time(problem, build)
        if "verify" in self.result.stages:
            self.result.stages["verify"].started_s = verify_started - self.t0
        if not ok:
            return
        if self.opts.profile:
            await self.baselines(problem, early)
        if self.result.correct and self.result.status is not EvalStatus.INFRA_ERROR:
            finish(self.result, margin=self.opts.reward_margin, sanity_bound=self.opts.speedup_sanity_bound,
                   noisy_is_infra=self.window_checked)

    # -- stages ---------------------------------------------------------------------------
    def static_check(self) -> bool:
        t0 = time.monotonic()
        report = check_candidate(self.job.files)
        outcome = self.stage("static_check", ok=report.ok, duration_s=time.monotonic() - t0,
                             log="\n".join(report.errors + report.violations))
        if report.errors:
            fail(self.result, EvalStatus.STATIC_CHECK_FAILED, "; ".join(report.errors))
        elif report.violations:
            fail(self.result, EvalStatus.VIOLATION, report.violations[0], report.violations)
        return bool(outcome.ok)

    async def compile(self, build: BuildResult | None) -> BuildResult | None:
        if build is None:
            build = await build_extension(self.job.files, self.job.device, cache_dir=self.ev.cache_dir,
                                          timeout_s=self.opts.compile_timeout_s)
        self.result.receipt.toolchain = build.toolchain
        outcome = self.stage("compile", ok=build.ok, duration_s=build.duration_s, log=build.log, cached=build.cached)
        self.result.compiled = build.ok
        if not build.ok:
            reason = "compile timed out" if build.timed_out else "compile failed"
            fail(self.result, EvalStatus.COMPILE_ERROR, f"{reason}: {build.log.splitlines()[0] if build.log else ''}")
            return None
        violations = build.expanded_violations + await check_object_symbols(build.objects)
        if violations:
            outcome.ok = False
            outcome.log = "\n".join(violations)
            fail(self.result, EvalStatus.VIOLATION, violations[0], violations)
            return None
        return build

    async def verify_and_time(self, problem: Problem, build: BuildResult) -> bool:
        work = self.ahead.work if self.ahead is not None else new_work_folder()
        try:
            return await self._verify_and_time(problem, build, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _verify_and_time(self, problem: Problem, build: BuildResult, work: str) -> bool:
        t0 = time.monotonic()
        # The child starts (fork, hardening, CUDA context) while the reference is prepared; it waits
        # for its draws (`go`) and then for the gate between steps (gate.py). The one-shot path may
        # have started it already, in the same work folder (early_child.py).
        await self.lease.start_child(self.ev.child_need(problem))
        early = self.ahead.take_child() if self.ahead is not None else None
        if early is not None:
            child, fd = early.take()
            region = OutputRegion(fd)  # the child's trial outputs: made before its fork, sealed after prepare
        else:
            spec = candidate_spec(self.job, work=work, so_path=private_copy(build.so_path or "", work),
                                  device_index=self.ev.config.device_index, isolate=self.ev.config.isolate,
                                  cpu_memory_limit_mb=self.ev.config.cpu_memory_limit_mb)
            region = OutputRegion()
            try:
                child = ChildProcess(self.ev.zygote, spec, region.fd)
            except BaseException:
                region.close()
                raise
        try:
            try:
                await self.lease.shared()  # the reference runs on the device, beside other evaluations' steps
                t_gate = time.monotonic()
                if self.ahead is not None:
                    prepared = await self.ahead.take()
                else:
                    prepared = await prepare_reference(self.ev.device, self.lease, problem, self.job, work, self.seed)
                prepare_s = time.monotonic() - t_gate
                self.ev.learn_call_bytes(problem, prepared)
                await self.lease.grow_need(self.ev.child_need(problem))  # before the child draws its inputs
                await asyncio.to_thread(region.seal, region_bytes(prepared.trial_outputs[0]), self.job.device == "cuda")
            except BaseException:
                child.kill()
                raise
            verify = self.stage("verify", ok=None)
            session = CandidateSession(SessionSetting(device=self.ev.device, options=self.opts, atol=self.atol,
                                                      rtol=self.rtol, result=self.result, lease=self.lease,
                                                      stage=self.stage), prepared, work, region)
            session.marks.append(("reference prepared", time.monotonic() - t0))
            try:
                ok = await session.run(verify, child)
            finally:
                self.neighbour_sensitive = session.neighbour_sensitive
        finally:
            await self.lease.release()
            await self.lease.child_ended()  # the child is dead (session.run kills it)
            pinned = region.shared is not None and region.shared.pinned
            region.close()
        verify.duration_s = time.monotonic() - t0
        marks = " | ".join(f"{name} {at:.2f}s" for name, at in session.marks_since(t0))
        shared = "shared with other evaluations" if self.lease.overlapped else "no other evaluation"
        verify.log = (verify.log + f"\nphases (s since start): {marks}"
                      f"\ndevice: reference {prepare_s:.2f}s{self._ahead_note(t0)}; waited for the gate {self.lease.waited_s:.2f}s; "
                      f"alone {session.exclusive_s:.2f}s; {shared}"
                      f"\nchild: {'started ahead, before this evaluator took the job' if early else 'started at verification'}"
                      f"\ntrial outputs: {session.region_reads} through the shared region{' (pinned)' if pinned else ''}, "
                      f"{session.file_reads} through files").strip()
        return ok

    def _ahead_note(self, t0: float) -> str:
        ahead = self.ahead
        if ahead is None or ahead.span is None:
            return ""
        began, ended = ahead.span
        lead = t0 - ended
        when = f"done {lead:.2f}s before verification began" if lead >= 0 else f"verification waited {-lead:.2f}s for it"
        return f" (prepared ahead in {ended - began:.2f}s, {when})"

    async def baselines(self, problem: Problem, early: "asyncio.Task[baseline_mod.Baselines] | None" = None) -> None:
        """Serve the task's baselines from the cache, else measure them (device solo); `early`: the
        measurement `start_baselines` ran during the compile (cuda)."""
        t0 = time.monotonic()
        notes: list[str] = []
        started_s: float | None = t0 - self.t0
        if early is not None:
            cached, hit = early.result(), False  # its failure is this stage's, as in the sequential order
            began, ended = self._early_span
            started_s, duration_s = began - self.t0, ended - began
            compile_stage = self.result.stages.get("compile")
            if compile_stage is not None and compile_stage.started_s is not None and compile_stage.duration_s:
                compile_end = compile_stage.started_s + compile_stage.duration_s
                notes.append(f"measured during the candidate's compile: began {compile_end - started_s:.2f} s "
                             "before the compile ended")
        else:
            key = self.baseline_key(problem)
            cached = None if self.opts.refresh_baselines else self.ev.baseline_cache.get(key)
            hit = cached is not None
            if cached is None:
                await self.lease.acquire_solo()  # baselines are timed: nothing else on the device
                cached = await self._measure(problem, key)
            elif self.result.correct and self.window_checked:
                # only a reward needs them: is the cached eager time true in this window?
                checked = await self._checked_in_window(problem, key, cached, notes)
                if checked is None:
                    self.stage("baselines", ok=False, cached=True, duration_s=time.monotonic() - t0,
                               started_s=started_s, log="\n".join(notes))
                    return
                hit, cached = checked is cached, checked
            duration_s = time.monotonic() - t0
        self.result.timings["eager"] = cached.eager
        self.result.eager_us = cached.eager.median_us
        if cached.torch_compile is not None:
            self.result.timings["torch_compile"] = cached.torch_compile
            self.result.torch_compile_us = cached.torch_compile.median_us
        self.result.warnings += cached.warnings
        notes += ([f"torch.compile unavailable: {cached.compile_error}"] if cached.compile_error else []) + cached.warnings
        self.stage("baselines", ok=True, cached=hit, duration_s=duration_s, started_s=started_s, log="\n".join(notes))

    async def _checked_in_window(self, problem: Problem, key: str, cached: baseline_mod.Baselines,
                                 notes: list[str]) -> baseline_mod.Baselines | None:
        """The cached baselines if the eager reference, timed again now, agrees with them (or differs by less than
        LOADED_FACTOR: then with a warning). Slower by more: the machine is loaded, the candidate was timed under
        a load the baselines were not; None, the result failed as infra_error naming it. Faster by more: the
        baselines were cached under load; they are timed again now, the cache entry replaced, and returned
        (None, infra_error, if the load changes meanwhile). window_check.py."""
        # timed like a candidate: the device exclusive (no other evaluation's step running), its child counted
        # live on the device; not solo, which would preempt every pipelined neighbour on each evaluation. The
        # child sets itself up (its CUDA context) before the exclusive window, while the device is shared.
        timeout_s = self.ev.config.baseline_timeout_s
        ahead, self.check_ahead = self.check_ahead, None
        ahead = await ahead.take() if ahead is not None else None
        if ahead is not None:
            try:
                now = await ahead.time(timeout_s)
            finally:
                await ahead.close()
            notes.append("window check: its child started beside the verification")
        else:
            now = await self._check_now(problem, timeout_s)
        if isinstance(now, str):
            raise InfraError(f"the eager reference's window check failed: {now}")
        self.result.timings["eager_window_check"] = now
        check = window_check.compare(now, cached.eager)
        if check.agrees:
            notes.append(f"window check: {check.describe()}: the cached baselines hold")
            return cached
        if check.loaded:
            return self._loaded(notes, f"machine loaded: {check.describe()}: the candidate was timed under a load "
                                       "its baselines were not, so no reward is decided; evaluate again on a quiet "
                                       "machine")
        if check.undecided:
            return self._loaded(notes, f"machine loaded: the window is too noisy to tell: {check.describe()}: no "
                                       "reward is decided; evaluate again on a quiet machine")
        if not check.cached_loaded:  # a drift under LOADED_FACTOR either way: the cached baselines, with a warning
            candidate = self.result.timings.get("candidate")
            if candidate is not None and not window_check.same_eager_verdict(candidate, now, cached.eager,
                                                                                 self.opts.reward_margin):
                return self._loaded(notes, f"machine loaded: {check.describe()}: the candidate "
                                           f"({window_check.describe_stats(candidate)}) beats eager against one and "
                                           "not the other, so no reward is decided; evaluate again on a quiet machine")
            note = (f"{'timed under some load' if check.slower else 'baselines cached under some load'}: "
                    f"{check.describe()} (less than {window_check.LOADED_FACTOR:g}x apart: the cached baselines "
                    "are used)")
            self.result.warnings.append(note)
            notes.append(note)
            return cached
        await self.lease.acquire_solo()  # baselines are timed: nothing else on the device
        fresh = await self._measure(problem, key, cache=False)
        moved = window_check.compare(now, fresh.eager)
        if moved.loaded or moved.cached_loaded:  # more than LOADED_FACTOR apart: not the machine's usual drift
            return self._loaded(notes, f"machine loaded: {check.describe()}, and "
                                       f"{window_check.describe_stats(fresh.eager)} when the baselines were timed "
                                       "again a moment later: the load changed under this evaluation, no reward is "
                                       "decided")
        self.ev.baseline_cache.put(fresh)  # the cached ones were timed under a load: replaced
        note = (f"baselines timed again: {check.describe()}, so they had been cached under a load; eager now "
                f"{window_check.describe_stats(fresh.eager)}, the cache entry replaced")
        self.result.warnings.append(note)
        notes.append(note)
        return fresh

    def _eager_check(self, problem: Problem) -> baseline_mod.EagerCheck:
        return baseline_mod.EagerCheck(
            problem, self.ev.zygote, device=self.job.device, device_index=self.ev.config.device_index,
            tf32=self.opts.precision_policy is PrecisionPolicy.MATCHED, warmup=self.opts.warmup_calls)

    async def _check_now(self, problem: Problem, timeout_s: float) -> TimingStats | str:
        """The window check's child started now, after the candidate's, under the evaluation's own lease."""
        await self.lease.start_child(self.ev.child_need(problem))
        check_child: baseline_mod.EagerCheck | None = None
        try:
            check_child = self._eager_check(problem)
            now = await check_child.ready(timeout_s)
            if now is None:
                await self.lease.exclusive()
                now = await check_child.time(timeout_s)
        finally:
            if check_child is not None:
                check_child.close()
            await self.lease.release()
            await self.lease.child_ended()
        return now

    def start_check_ahead(self, problem: Problem, early: "asyncio.Task[baseline_mod.Baselines] | None") -> CheckAhead | None:
        """With the window check on and the task's baselines cached (known now: they are not measured in this
        evaluation), the check's child started beside the verification (check_ahead.py); None otherwise, and in
        a solo run (a companion's admission would wait for the solo run to end)."""
        if not (self.opts.profile and self.window_checked):
            return None
        if early is not None or self.lease.solo or self.opts.refresh_baselines:
            return None
        if self.ev.baseline_cache.get(self.baseline_key(problem)) is None:
            return None
        return CheckAhead(self.lease, self.ev.child_need(problem), lambda: self._eager_check(problem),
                          self.ev.config.baseline_timeout_s)

    def _loaded(self, notes: list[str], message: str) -> None:
        notes.append(message)
        fail(self.result, EvalStatus.INFRA_ERROR, message)
        return None

    def baseline_key(self, problem: Problem) -> str:
        return baseline_mod.baseline_key(
            problem, self.result.receipt.device_name, torch.__version__,
            self.opts.precision_policy is PrecisionPolicy.MATCHED, self.opts.timed_calls,
            device=self.job.device, warmup=self.opts.warmup_calls)

    async def _measure(self, problem: Problem, key: str, *, cache: bool = True) -> baseline_mod.Baselines:
        """Time the baselines (the caller holds the device solo) and, unless `cache` is False, cache them."""
        measured = await baseline_mod.measure(
            problem, self.ev.zygote, device=self.job.device, device_index=self.ev.config.device_index,
            tf32=self.opts.precision_policy is PrecisionPolicy.MATCHED, n_sets=self.opts.timed_calls,
            warmup=self.opts.warmup_calls, key=key, timeout_s=self.ev.config.baseline_timeout_s)
        if cache:
            self.ev.baseline_cache.put(measured)
        return measured

    def start_baselines(self, problem: Problem) -> "asyncio.Task[baseline_mod.Baselines] | None":
        """On a baseline cache miss, start measuring them now (while the candidate compiles); None on a hit."""
        key = self.baseline_key(problem)
        if not self.opts.refresh_baselines and self.ev.baseline_cache.get(key) is not None:
            return None  # served after verification, as ever
        return asyncio.create_task(self._measure_solo(problem, key))

    async def _measure_solo(self, problem: Problem, key: str) -> baseline_mod.Baselines:
        # A lease of its own: held solo only while measuring, so the candidate's verification after it
        # shares the device with other evaluations as usual (the run's lease would stay solo to its end).
        lease = self.ev.gate.lease()
        try:
            await lease.acquire_solo()
            began = time.monotonic()
            measured = await self._measure(problem, key)
            self._early_span = (began, time.monotonic())
            return measured
        finally:
            await lease.close()


async def evaluate_job(job: EvalJob, config: EvaluatorConfig | None = None) -> EvalResult:
    """One-shot helper: evaluate `job` with a fresh embedded evaluator."""
    cfg = config or EvaluatorConfig(device=job.device)
    async with Evaluator(cfg) as evaluator:
        return await evaluator.evaluate(job)


__all__ = ["Evaluator", "EvaluatorConfig", "PendingBuild", "evaluate_job", "overlap_baselines"]

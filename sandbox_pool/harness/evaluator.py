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
import random
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from collections.abc import Callable, Coroutine
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import InfraError, ProblemError
from cuda_agent.sandbox_pool.harness import baselines as baseline_mod
from cuda_agent.sandbox_pool.harness.compiler import BuildResult, build_extension, default_cache_dir
from cuda_agent.sandbox_pool.harness.compiler.symbols import check_object_symbols
from cuda_agent.sandbox_pool.harness.child.hardening import make_undumpable
from cuda_agent.sandbox_pool.harness.clock import too_fast
from cuda_agent.sandbox_pool.harness.compare import (
    compare_outputs,
    decode_prints,
    fingerprint_mismatch,
    influence_mismatch,
)
from cuda_agent.sandbox_pool.harness.gate import DeviceGate, Lease, Preempted
from cuda_agent.sandbox_pool.harness.models import (
    EvalJob,
    EvalResult,
    EvalStatus,
    PrecisionPolicy,
    Receipt,
    StageOutcome,
)
from cuda_agent.sandbox_pool.harness.inputs import same_digest
from cuda_agent.sandbox_pool.harness.output_buffer import OutputRegion, region_bytes
from cuda_agent.sandbox_pool.harness.outputs import OutputFormatError, read_outputs
from cuda_agent.sandbox_pool.harness.problem import Problem, load_problem
from cuda_agent.sandbox_pool.harness.protocol import ChildSpec, output_file
from cuda_agent.sandbox_pool.harness.reference import PreparedReference, own_stream, prepare
from cuda_agent.sandbox_pool.harness.runner import ChildEnded, ChildProcess, ChildTimeout, Zygote, describe_exit
from cuda_agent.sandbox_pool.harness.static_check import check_candidate
from cuda_agent.sandbox_pool.harness.stats import timing_stats
from cuda_agent.sandbox_pool.harness.verdict import fail, finish

logger = logging.getLogger(__name__)

HARNESS_VERSION = "1"

NEIGHBOUR_SENSITIVE = frozenset({EvalStatus.CRASH, EvalStatus.LOAD_ERROR, EvalStatus.TIMEOUT})
"""Verdicts another evaluation on the same device could have caused (its memory, its share of the
device): reached while other children were alive, they are confirmed by a solo re-run (gate.py)."""
SHARED_ATTEMPTS = 3
"""Attempts of one evaluation that other evaluations preempt before it runs solo."""
POLL_S = 0.05
"""How often a waiting session looks whether it was preempted."""


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


class Evaluator:
    """A trusted worker. Use ``async with Evaluator(cfg) as ev: await ev.evaluate(job)``."""

    def __init__(self, config: EvaluatorConfig | None = None, gate: DeviceGate | None = None,
                 zygote: Zygote | None = None) -> None:
        """`zygote`: one already launched (`Zygote.launch`) for this device, adopted and closed with us."""
        self.config = config or EvaluatorConfig()
        self.cache_dir = Path(self.config.cache_dir or default_cache_dir())
        self.baseline_cache = baseline_mod.BaselineCache(self.cache_dir)
        # Who uses the device when; shared by every evaluator of one device (a worker passes its own).
        self.gate = gate or DeviceGate(self.config.preempt_after_s)
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
        finally:
            if ahead is not None:
                await ahead.discard()  # not taken (a compile error, a rejected candidate): its work goes
        result.wall_s = time.monotonic() - started
        return result

    def prepare_ahead(self, job: EvalJob) -> "ReferenceAhead":
        """Start preparing `job`'s reference now, before `evaluate` (the one-shot path: while the forkserver
        boots and the candidate compiles, so verification finds it done). Pass it to `evaluate`."""
        return ReferenceAhead(self, job)

    async def _attempts(self, job: EvalJob, build: "BuildResult | PendingBuild | None",
                        ahead: "ReferenceAhead | None" = None) -> EvalResult:
        """Run the job sharing the device; re-run it solo when sharing could have decided its verdict."""
        solo, notes = False, []
        for attempt in range(1, SHARED_ATTEMPTS + 2):
            result = EvalResult(status=EvalStatus.OK, precision_policy=job.options.precision_policy, device=job.device)
            result.receipt = self._receipt(job)
            lease = self.gate.lease()
            try:
                if solo:
                    await lease.acquire_solo()
                await _Run(self, job, result, lease, ahead if attempt == 1 else None).run(build)
            except Preempted as exc:
                solo = exc.solo_next or attempt >= SHARED_ATTEMPTS
                notes.append("stopped: " + ("a child step held up another evaluation's timed calls" if exc.solo_next
                                            else "another evaluation needed the device to itself"))
                continue
            except (InfraError, ProblemError, OSError, RuntimeError) as exc:
                if lease.overlapped and not solo:  # possibly a neighbour's doing (e.g. device memory)
                    notes.append(f"{type(exc).__name__} while sharing the device: re-run solo")
                    solo = True
                    continue
                if not isinstance(exc, (InfraError, ProblemError, OSError)):
                    raise
                logger.exception("infrastructure failure while evaluating %s", job.task_id)
                fail(result, EvalStatus.INFRA_ERROR, f"{type(exc).__name__}: {exc}")
            finally:
                await lease.close()
            if not solo and lease.overlapped and result.status in NEIGHBOUR_SENSITIVE:
                notes.append(f"{result.status.value} while other evaluations shared the device: re-run solo")
                solo = True
                continue
            break
        if notes:
            device = result.stages.setdefault("device", StageOutcome(ran=True, ok=True))
            device.log = "; ".join(notes) + ("; this result is from a solo run" if solo else "")
        return result

    def _receipt(self, job: EvalJob) -> Receipt:
        files = json.dumps(job.files, sort_keys=True).encode()
        if self.config.device == "cuda" and torch.cuda.is_available():
            name, driver = torch.cuda.get_device_name(self.config.device_index), f"cuda {torch.version.cuda}"
        else:
            name, driver = _cpu_name(), "n/a"
        return Receipt(device_name=name, driver=driver, torch_version=torch.__version__,
                       problem_sha256=hashlib.sha256(job.problem_src.encode()).hexdigest(),
                       candidate_sha256=hashlib.sha256(files).hexdigest(), harness_version=HARNESS_VERSION)


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
    is never inflated: HACKS.md, issue 12 item 4), so cpu keeps the sequential order. On cuda the
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
        self.seed = ahead.seed if ahead is not None else _draw_seed(self.opts.seed)
        self.result.receipt.seed = self.seed

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
        try:
            await self._stages(build, problem, early)
        except BaseException:  # infrastructure failure, preemption, cancellation: the measurement is abandoned
            if early is not None and not early.done():
                early.cancel()
            raise
        finally:
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
        ok = await self.verify_and_time(problem, build)
        if "verify" in self.result.stages:
            self.result.stages["verify"].started_s = verify_started - self.t0
        if not ok:
            return
        if self.opts.profile:
            await self.baselines(problem, early)
        if self.result.correct:
            finish(self.result, margin=self.opts.reward_margin, sanity_bound=self.opts.speedup_sanity_bound)

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
        violations = await check_object_symbols(build.objects)
        if violations:
            outcome.ok = False
            outcome.log = "\n".join(violations)
            fail(self.result, EvalStatus.VIOLATION, violations[0], violations)
            return None
        return build

    async def verify_and_time(self, problem: Problem, build: BuildResult) -> bool:
        work = self.ahead.work if self.ahead is not None else tempfile.mkdtemp(prefix="cuda_agent_eval_", dir=_fast_tmp())
        try:
            return await self._verify_and_time(problem, build, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _verify_and_time(self, problem: Problem, build: BuildResult, work: str) -> bool:
        t0 = time.monotonic()
        so_path = os.path.join(work, "cuda_extension.so")  # a private copy: the cache stays out of reach
        shutil.copyfile(build.so_path or "", so_path)
        spec = ChildSpec(
            role="candidate", device=self.job.device, device_index=self.ev.config.device_index, work_dir=work,
            so_path=so_path, model_new_src=self.job.files["model_new.py"], problem_src=problem.source,
            warmup=self.opts.warmup_calls,
            init_seed=secrets.randbits(62), isolate=self.ev.config.isolate,  # unrelated to any input seed
            memory_limit_mb=self.ev.config.cpu_memory_limit_mb if self.job.device == "cpu" else None,
            gated=True,
        )
        # The child starts (fork, hardening, CUDA context) while the reference is prepared; it waits
        # for its draws (`go`) and then for the gate between steps (gate.py).
        await self.lease.start_child()
        region = OutputRegion()  # the child's trial outputs: created before the fork, sealed after prepare
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
                    prepared = await prepare_reference(self.ev, self.lease, problem, self.job, work, self.seed)
                prepare_s = time.monotonic() - t_gate
                await asyncio.to_thread(region.seal, region_bytes(prepared.trial_outputs[0]), self.job.device == "cuda")
            except BaseException:
                child.kill()
                raise
            verify = self.stage("verify", ok=None)
            session = _CandidateSession(self, prepared, work, region)
            session.marks.append(("reference prepared", time.monotonic() - t0))
            ok = await session.run(verify, child)
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
            duration_s = time.monotonic() - t0
        self.result.timings["eager"] = cached.eager
        self.result.eager_us = cached.eager.median_us
        if cached.torch_compile is not None:
            self.result.timings["torch_compile"] = cached.torch_compile
            self.result.torch_compile_us = cached.torch_compile.median_us
        self.result.warnings += cached.warnings
        notes += ([f"torch.compile unavailable: {cached.compile_error}"] if cached.compile_error else []) + cached.warnings
        self.stage("baselines", ok=True, cached=hit, duration_s=duration_s, started_s=started_s, log="\n".join(notes))

    def baseline_key(self, problem: Problem) -> str:
        return baseline_mod.baseline_key(
            problem, self.result.receipt.device_name, torch.__version__,
            self.opts.precision_policy is PrecisionPolicy.MATCHED, self.opts.timed_calls,
            device=self.job.device, warmup=self.opts.warmup_calls)

    async def _measure(self, problem: Problem, key: str) -> baseline_mod.Baselines:
        """Time the baselines (the caller holds the device solo) and cache them."""
        measured = await baseline_mod.measure(
            problem, self.ev.zygote, device=self.job.device, device_index=self.ev.config.device_index,
            tf32=self.opts.precision_policy is PrecisionPolicy.MATCHED, n_sets=self.opts.timed_calls,
            warmup=self.opts.warmup_calls, key=key, timeout_s=self.ev.config.baseline_timeout_s)
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


def _draw_seed(fixed: int | None) -> int:
    return fixed if fixed is not None else random.randrange(1, 2**31 - 2**20)


def gate_pause(lease: Lease, loop: asyncio.AbstractEventLoop, device: str,
               stop: threading.Event | None = None) -> Callable[[], None]:
    """`reference.prepare`'s pause, for the worker thread that prepares under `lease` (held shared):
    while another evaluation's timed window waits for the device, finish this thread's queued
    device work, give the device up and take it again after the window. Without it, a timed window
    waited for whole preparations (~40 reference runs each; 0.7 s per evaluation with four in
    flight on the H200) and the device idled meanwhile. `stop` set: the preparation is abandoned."""
    cuda = torch.device(device).type == "cuda"

    def pause() -> None:
        if stop is not None and stop.is_set():
            raise asyncio.CancelledError("reference preparation abandoned")
        if not lease.gate.exclusive_wanted:
            return
        if cuda:
            torch.cuda.current_stream(device).synchronize()
        asyncio.run_coroutine_threadsafe(lease.shared(), loop).result()  # Preempted: the attempt stops

    return pause


async def prepare_reference(ev: Evaluator, lease: Lease, problem: Problem, job: EvalJob, work: str,
                            seed: int, stop: threading.Event | None = None) -> PreparedReference:
    """`reference.prepare` for `job` in a worker thread, on a stream of its own (`own_stream`), pausing
    for other evaluations' timed windows (`gate_pause`); `lease` is held shared."""
    opts = job.options
    atol, rtol = opts.tolerances()
    return await asyncio.to_thread(
        own_stream, ev.device, prepare, problem, work, ev.device, seed=seed, trials=opts.correctness_trials,
        timed_calls=opts.timed_calls if opts.profile else 0, atol=atol, rtol=rtol,
        print_seed=secrets.randbits(62),  # never sent before the timed call it is for
        influence_checks=opts.influence_checks, checked_calls=opts.checked_timed_calls, pause=gate_pause(lease, asyncio.get_running_loop(), ev.device, stop))


class ReferenceAhead:
    """One job's reference, prepared before its evaluation reaches verification (`Evaluator.prepare_ahead`).

    The one-shot path starts it as soon as the evaluator exists: the preparation (~1 s in a fresh
    process on the H200: CUDA's first kernels, cuBLAS, ~40 reference runs) then runs while the
    forkserver boots and the candidate compiles, instead of after both. It holds the device shared
    under a lease of its own (a baseline measurement waits for it, `gate_pause` lets one go first)
    and chooses the seed the evaluation's first attempt uses; a later attempt prepares afresh."""

    def __init__(self, ev: Evaluator, job: EvalJob) -> None:
        self.seed = _draw_seed(job.options.seed)
        self.work = tempfile.mkdtemp(prefix="cuda_agent_eval_", dir=_fast_tmp())
        self._taken = False
        self._stop = threading.Event()
        self.span: tuple[float, float] | None = None  # (began, ended) of the preparation, monotonic
        self.task: asyncio.Task[PreparedReference] = asyncio.ensure_future(self._prepare(ev, job))

    async def _prepare(self, ev: Evaluator, job: EvalJob) -> PreparedReference:
        problem = load_problem(job.problem_src)
        lease = ev.gate.lease()
        try:
            await lease.shared()
            began = time.monotonic()
            prepared = await prepare_reference(ev, lease, problem, job, self.work, self.seed, self._stop)
            self.span = (began, time.monotonic())
            return prepared
        finally:
            await lease.close()

    async def take(self) -> PreparedReference:
        """The prepared reference (its failure is the evaluation's); the run owns `work` from now on."""
        self._taken = True
        return await self.task

    async def discard(self) -> None:
        """End an untaken preparation and remove its folder (an evaluation that stopped before verifying)."""
        if self._taken:
            return
        self._taken = True
        self._stop.set()  # a running preparation stops at its next step; its lease holds the device till then
        await asyncio.wait({self.task})
        if not self.task.cancelled():
            self.task.exception()  # retrieved: nobody needs it
        shutil.rmtree(self.work, ignore_errors=True)


def _fast_tmp() -> str | None:
    """/dev/shm when it is writable and allows executables (the child maps the .so from there)."""
    shm = "/dev/shm"
    if not (os.path.isdir(shm) and os.access(shm, os.W_OK)):
        return None
    return None if os.statvfs(shm).f_flag & os.ST_NOEXEC else shm


class _CandidateSession:
    """Drives one candidate child through verification and timing, judging each message."""

    def __init__(self, run: _Run, prepared: PreparedReference, work: str, region: OutputRegion | None = None) -> None:
        self.run_ = run
        self.region = region
        self.region_reads = self.file_reads = 0
        self.result = run.result
        self.prepared = prepared
        self.work = work
        self.marks: list[tuple[str, float]] = []
        self._events: list[tuple[str, float]] = []
        self.prints_asked: set[int] = set()
        self.prints_checked: set[int] = set()
        self.child: ChildProcess | None = None
        self.kept: dict[int, list[Any]] = {}  # the candidate's outputs on draws that influence twins perturb
        self.twin_outputs: list[Any] | None = None  # the candidate's outputs on the current twin
        self.influence_ratios: list[float] = []
        self.lease = run.lease
        self.exclusive_s = 0.0
        self._exclusive_since: float | None = None

    def marks_since(self, t0: float) -> list[tuple[str, float]]:
        return self.marks + [(name, at - t0) for name, at in self._events]

    async def run(self, verify: StageOutcome, child: ChildProcess) -> bool:
        self.child = child
        lease = self.lease
        start = time.monotonic()
        try:
            while True:
                # The candidate's time limit does not count the time spent waiting for the device.
                deadline = start + self.run_.opts.run_timeout_s + lease.waited_s
                if lease.mode != "exclusive":
                    lease.check_preempted()
                try:
                    message = await child.receive(min(deadline, time.monotonic() + POLL_S))
                except ChildTimeout:
                    if time.monotonic() < start + self.run_.opts.run_timeout_s + lease.waited_s:
                        continue
                    raise
                if message.get("event") == "timed":  # reveal the checked positions of that call
                    child.reply(print_seed=self.print_seed(message.get("k")))
                    continue
                verdict = await self.handle(message, verify)
                if verdict is not None:
                    return verdict
        except ChildTimeout:
            fail(self.result, EvalStatus.TIMEOUT, f"the candidate did not finish within {self.run_.opts.run_timeout_s:.0f} s")
        except ChildEnded as exc:
            fail(self.result, EvalStatus.CRASH, f"the candidate process died ({describe_exit(exc.exitcode)})")
        finally:
            child.kill()
            self._end_exclusive()
        verify.ok = False
        return False

    async def _exclusive(self) -> None:
        await self.lease.exclusive()
        self._exclusive_since = time.monotonic()

    def _end_exclusive(self) -> None:
        if self._exclusive_since is not None:
            self.exclusive_s += time.monotonic() - self._exclusive_since
            self._exclusive_since = None

    async def _go_on(self, exclusive: bool = False) -> None:
        """Let the paused child take its next step: sharing the device, or with it alone (timed calls)."""
        assert self.child is not None
        if exclusive:
            await self._exclusive()
        else:
            self._end_exclusive()
            await self.lease.shared(on_child=True)
        self.child.reply(go_on=True)

    async def handle(self, message: dict[str, Any], verify: StageOutcome) -> bool | None:
        event = message.get("event")
        if event != "print":
            self._events.append((f"{event}{message.get('k', '')}", time.monotonic()))
        self.lease.on_child = False  # the child is paused (or gone) until we answer
        if event == "ready":
            self.result.receipt.isolation = str(message.get("isolation", ""))
            await self._exclusive()  # the child calibrates its clock with the device to itself
            assert self.child is not None
            self.child.go(trial_draws=[d.model_dump() for d in self.prepared.trial_draws],
                          timing_draws=[d.model_dump() for d in self.prepared.timing_draws],
                          poison_bytes=self.prepared.output_nbytes,
                          output_region_bytes=self.region.nbytes if self.region is not None else 0)
        elif event == "calibrated":
            await self._go_on()
        elif event == "drawn":
            self.check_draws(message.get("digests"))
            await self._go_on()
        elif event == "loaded":
            verify.log = f"weights loaded by name: {message.get('weights')}"
            await self._go_on()
        elif event == "error":
            self.on_error(message, verify)
            return False
        elif event == "trial":
            verdict = await self.on_trial(message, verify)
            if verdict is None:
                await self._go_on()
            return verdict
        elif event == "ahead":  # the child drew some of its timed calls' inputs ahead (a shared step)
            await self._go_on()
        elif event == "warm":
            await self._go_on(exclusive=True)
        elif event == "print":
            return self.on_print(message)
        elif event == "timing":
            self._end_exclusive()
            verdict = self.on_timing(message)
            await self.lease.release()
            return verdict
        elif event == "done":
            return True
        return None

    def check_draws(self, digests: Any) -> None:
        """The child drew its trial inputs before loading any candidate code: a mismatch is the problem's."""
        expected = self.prepared.trial_digests
        if not isinstance(digests, list) or len(digests) != len(expected) or not all(
                same_digest(got, want) for got, want in zip(digests, expected)):
            raise ProblemError("get_inputs() gives different values in two processes under the same seeds; "
                               "the task needs reproducible inputs (seeded torch / random / numpy draws only)")

    def on_error(self, message: dict[str, Any], verify: StageOutcome) -> None:
        verify.ok = False
        detail = f"{message.get('kind')}: {message.get('message')}"
        verify.log = (verify.log + "\n" + str(message.get("traceback", ""))).strip()[-4000:]
        if message.get("stage") == "setup":  # before the candidate's code was loaded
            raise InfraError(f"the evaluation child could not start: {detail}")
        if message.get("stage") == "draw":
            raise ProblemError(f"get_inputs() failed in the evaluation child: {detail}")
        if message.get("violations"):
            fail(self.result, EvalStatus.VIOLATION, message["violations"][0], message["violations"])
        elif message.get("stage") in ("load", "construct"):
            fail(self.result, EvalStatus.LOAD_ERROR, f"model_new.py could not be loaded: {detail}")
        else:
            fail(self.result, EvalStatus.CRASH, f"the candidate raised during {message.get('stage')}: {detail}")

    async def on_trial(self, message: dict[str, Any], verify: StageOutcome) -> bool | None:
        k = int(message["k"])
        problems = list(message.get("violations") or []) + list(message.get("type_errors") or [])
        if message.get("input_mutated") and not self.prepared.reference_mutates_inputs:
            problems.append("forward modified its inputs in place")
        if problems:
            verify.ok = False
            fail(self.result, EvalStatus.VIOLATION, problems[0], problems)
            return False
        try:  # in a thread: the other evaluations' sessions go on meanwhile
            mismatch = await asyncio.to_thread(own_stream, self.run_.ev.device, self._check_trial, k,
                                               message.get("layout"))
        except OutputFormatError as exc:
            verify.ok = False
            fail(self.result, EvalStatus.VIOLATION, f"trial {k}: {exc}", [str(exc)])
            return False
        if mismatch:
            verify.ok = False
            dist = self.prepared.trial_draws[k].distribution
            verify.log = f"trial {k} ({dist} inputs): {mismatch}"
            fail(self.result, EvalStatus.INCORRECT, f"wrong output on trial {k} ({dist} inputs): {mismatch}")
            return False
        if not await self.check_influence(k, verify):
            return False
        trials = len(self.prepared.trial_draws)
        if k == trials - 1:
            verify.ok = True
            self.result.correct = True
            ratios = ", ".join(f"{r:.2g}" for r in self.influence_ratios)
            verify.log = (verify.log + f"\n{trials}/{trials} trials match"
                          + (f"; influence residuals {ratios}" if ratios else "")).strip()
            if not self.prepared.timing_draws:
                return True
        return None

    def _check_trial(self, k: int, layout: Any) -> str | None:
        outputs = read_outputs(os.path.join(self.work, output_file(k)), layout, self.run_.ev.device, self.region)
        if any(isinstance(entry, dict) and entry.get("shared") for entry in layout):
            self.region_reads += 1
        else:
            self.file_reads += 1
        if k in self.prepared.influence.values():  # a draw an influence twin perturbs
            self.kept[k] = outputs
        self.twin_outputs = outputs if k in self.prepared.influence else None
        return compare_outputs(outputs, self.prepared.trial_outputs[k], self.run_.atol, self.run_.rtol)

    async def check_influence(self, k: int, verify: StageOutcome) -> bool:
        """On an influence twin: did the candidate's output move as the reference's did?"""
        base = self.prepared.influence.get(k)
        if base is None or base not in self.kept or self.twin_outputs is None:
            return True
        twin = self.prepared.trial_draws[k]
        mismatch, ratios = await asyncio.to_thread(
            own_stream, self.run_.ev.device, influence_mismatch, self.kept[base], self.twin_outputs,
            self.prepared.trial_outputs[base],
            self.prepared.trial_outputs[k], twin.perturb_fraction)
        self.influence_ratios += ratios
        if mismatch:
            verify.ok = False
            verify.log = f"trial {k} (influence twin of trial {base}): {mismatch}"
            fail(self.result, EvalStatus.INCORRECT, f"influence check failed on trial {k}: {mismatch}")
            return False
        return True

    def print_seed(self, k: Any) -> int:
        if not isinstance(k, int) or not 0 <= k < len(self.prepared.print_seeds) or k in self.prints_asked:
            return 0  # out of order: its print cannot match, the verdict follows
        self.prints_asked.add(k)
        return self.prepared.print_seeds[k]

    def on_print(self, message: dict[str, Any]) -> bool | None:
        k = message.get("k")
        if not isinstance(k, int) or not 0 <= k < len(self.prepared.timing_prints) or k in self.prints_checked:
            return self.timing_violation("the timing protocol was not followed")
        self.prints_checked.add(k)
        expected = self.prepared.timing_prints[k]
        if expected is None:  # not one of the checked calls
            return None
        got = decode_prints(message.get("fingerprint"))
        if got is None or fingerprint_mismatch(got, *expected):
            return self.timing_violation(f"the output of timed call {k} is wrong although verification passed "
                                         "(results cached or behaviour changed while timed)")
        return None

    def timing_violation(self, problem: str) -> bool:
        self.run_.stage("profile", ok=False)
        fail(self.result, EvalStatus.VIOLATION, problem, [problem])
        return False

    def on_timing(self, message: dict[str, Any]) -> bool:
        problems = list(message.get("violations") or []) + list(message.get("type_errors") or [])
        if len(self.prints_checked) != len(self.prepared.timing_draws):
            problems.append("the timing protocol was not followed (timed outputs not all checked)")
        profile = self.run_.stage("profile", ok=not problems)
        if problems:
            fail(self.result, EvalStatus.VIOLATION, problems[0], problems)
            return False
        stats = timing_stats([float(s) for s in message["samples_us"]])
        assert self.child is not None
        self.child.clock.drain()
        bound = self.child.clock.bound()
        if bound is not None and too_fast(stats.median_us, bound):
            return self.timing_violation(
                f"the reported time ({stats.median_us:.1f} us per call) is far below what was observed from outside "
                f"the candidate's process ({bound[0]:.1f} us per call): the timer was tampered with or work was hidden")
        self.result.timings["candidate"] = stats
        self.result.runtime_us = stats.median_us
        checked = sum(self.prepared.timing_prints[k] is not None for k in self.prints_checked)
        profile.log = (f"{len(stats.samples_us)} timed calls on fresh inputs, the outputs of {checked} checked "
                       f"(chosen at random, secret); median {stats.median_us:.1f} us; "
                       f"host floor {message.get('host_floor_us', 0):.1f} us; timed by the host clock: "
                       f"{message.get('host_fallbacks', 0)}; L2 reset: {message.get('l2_reset')}; outside-process bound: "
                       + (f"{bound[0]:.1f} us (floor {bound[1]:.1f} us)" if bound else "unavailable")
                       + f"; timed loop {float(message.get('wall_s') or 0):.3f} s, "
                       f"of which timed calls {sum(stats.samples_us) / 1e6:.3f} s" + _split(message.get("split_s")))
        return True


def _split(split: Any) -> str:
    """The child's own account of its timed loop (untrusted: a log line, never a verdict)."""
    if not isinstance(split, dict):
        return ""
    try:
        parts = ", ".join(f"{name} {float(split[name]):.3f} s" for name in ("draws", "calls", "prints"))
        return f" ({parts}; waiting for the prints' positions {float(split['handshakes']):.3f} s)"
    except (KeyError, TypeError, ValueError):
        return ""


async def evaluate_job(job: EvalJob, config: EvaluatorConfig | None = None) -> EvalResult:
    """One-shot helper: evaluate `job` with a fresh embedded evaluator."""
    cfg = config or EvaluatorConfig(device=job.device)
    async with Evaluator(cfg) as evaluator:
        return await evaluator.evaluate(job)


__all__ = ["Evaluator", "EvaluatorConfig", "PendingBuild", "evaluate_job", "overlap_baselines"]

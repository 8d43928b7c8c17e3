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
import time
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import InfraError, ProblemError
from cuda_agent.sandbox_pool.harness import baselines as baseline_mod
from cuda_agent.sandbox_pool.harness.compiler import BuildResult, build_extension, default_cache_dir
from cuda_agent.sandbox_pool.harness.compiler.symbols import check_object_symbols
from cuda_agent.sandbox_pool.harness.child.hardening import make_undumpable
from cuda_agent.sandbox_pool.harness.clock import too_fast
from cuda_agent.sandbox_pool.harness.compare import compare_outputs, fingerprint_mismatch
from cuda_agent.sandbox_pool.harness.models import (
    EvalJob,
    EvalResult,
    EvalStatus,
    PrecisionPolicy,
    Receipt,
    StageOutcome,
)
from cuda_agent.sandbox_pool.harness.inputs import same_digest
from cuda_agent.sandbox_pool.harness.outputs import OutputFormatError, read_outputs
from cuda_agent.sandbox_pool.harness.problem import Problem, load_problem
from cuda_agent.sandbox_pool.harness.protocol import ChildSpec, output_file
from cuda_agent.sandbox_pool.harness.reference import PreparedReference, prepare
from cuda_agent.sandbox_pool.harness.runner import ChildEnded, ChildProcess, ChildTimeout, Zygote, describe_exit
from cuda_agent.sandbox_pool.harness.static_check import check_candidate
from cuda_agent.sandbox_pool.harness.stats import timing_stats
from cuda_agent.sandbox_pool.harness.verdict import fail, finish

logger = logging.getLogger(__name__)

HARNESS_VERSION = "1"


class EvaluatorConfig(BaseModel):
    """Configuration of one trusted evaluation worker."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field("cpu", description="'cpu' or 'cuda'.")
    device_index: int = Field(0, ge=0, description="GPU index (cuda only).")
    cache_dir: Path | None = Field(None, description="Compile and baseline cache; default $CUDA_AGENT_CACHE or ~/.cache/cuda_agent.")
    isolate: bool = Field(True, description="Run candidates in a user+network namespace.")
    cpu_memory_limit_mb: int = Field(16384, description="Address-space limit of a CPU candidate child.")
    baseline_timeout_s: float = Field(900.0, description="Limit for measuring one baseline (torch.compile included).")


class Evaluator:
    """A trusted worker. Use ``async with Evaluator(cfg) as ev: await ev.evaluate(job)``."""

    def __init__(self, config: EvaluatorConfig | None = None) -> None:
        self.config = config or EvaluatorConfig()
        self.cache_dir = Path(self.config.cache_dir or default_cache_dir())
        self.baseline_cache = baseline_mod.BaselineCache(self.cache_dir)
        self._lock = asyncio.Lock()
        self._started = False
        self.zygote = Zygote(cuda=self.config.device == "cuda")

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

    async def evaluate(self, job: EvalJob, build: BuildResult | None = None) -> EvalResult:
        """Evaluate one job. Candidate failures are results; harness failures are INFRA_ERROR results."""
        await self.start()
        if job.device != self.config.device:
            raise InfraError(f"job for device {job.device!r} sent to a {self.config.device!r} evaluator")
        started = time.monotonic()
        result = EvalResult(status=EvalStatus.OK, precision_policy=job.options.precision_policy, device=job.device)
        result.receipt = self._receipt(job)
        async with self._lock:  # one evaluation at a time: exclusive device while timing
            try:
                await _Run(self, job, result).run(build)
            except (InfraError, ProblemError, OSError) as exc:
                logger.exception("infrastructure failure while evaluating %s", job.task_id)
                fail(result, EvalStatus.INFRA_ERROR, f"{type(exc).__name__}: {exc}")
        result.wall_s = time.monotonic() - started
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


class _Run:
    """One evaluation, as a sequence of named stages."""

    def __init__(self, evaluator: Evaluator, job: EvalJob, result: EvalResult) -> None:
        self.ev = evaluator
        self.job = job
        self.opts = job.options
        self.result = result
        self.atol, self.rtol = self.opts.tolerances()
        self.seed = self.opts.seed if self.opts.seed is not None else random.randrange(1, 2**31 - 2**20)
        self.result.receipt.seed = self.seed

    def stage(self, name: str, **fields: Any) -> StageOutcome:
        outcome = StageOutcome(ran=True, **fields)
        self.result.stages[name] = outcome
        return outcome

    async def run(self, build: BuildResult | None) -> None:
        if not self.static_check():
            return
        build = await self.compile(build)
        if build is None:
            return
        problem = load_problem(self.job.problem_src)
        if not await self.verify_and_time(problem, build):
            return
        if self.opts.profile:
            await self.baselines(problem)
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
        work = tempfile.mkdtemp(prefix="cuda_agent_eval_", dir=_fast_tmp())
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
        )
        # The child starts (fork, hardening, CUDA context) while the reference is prepared.
        child = ChildProcess(self.ev.zygote, spec)
        try:
            prepared = await asyncio.to_thread(
                prepare, problem, work, self.ev.device, seed=self.seed, trials=self.opts.correctness_trials,
                timed_calls=self.opts.timed_calls if self.opts.profile else 0, atol=self.atol, rtol=self.rtol,
                print_seed=secrets.randbits(62))  # never sent before the timed call it is for
        except BaseException:
            child.kill()
            raise
        child.go(trial_draws=[d.model_dump() for d in prepared.trial_draws],
                 timing_draws=[d.model_dump() for d in prepared.timing_draws], poison_bytes=prepared.output_nbytes)
        verify = self.stage("verify", ok=None)
        session = _CandidateSession(self, prepared, work)
        session.marks.append(("reference prepared", time.monotonic() - t0))
        ok = await session.run(verify, child)
        verify.duration_s = time.monotonic() - t0
        marks = " | ".join(f"{name} {at:.2f}s" for name, at in session.marks_since(t0))
        verify.log = (verify.log + f"\nphases (s since start): {marks}").strip()
        return ok

    async def baselines(self, problem: Problem) -> None:
        t0 = time.monotonic()
        tf32 = self.opts.precision_policy is PrecisionPolicy.MATCHED
        n_sets = self.opts.timed_calls
        key = baseline_mod.baseline_key(problem, self.result.receipt.device_name, torch.__version__, tf32, n_sets)
        cached = self.ev.baseline_cache.get(key)
        if cached is None:
            cached = await baseline_mod.measure(
                problem, self.ev.zygote, device=self.job.device, device_index=self.ev.config.device_index, tf32=tf32,
                n_sets=n_sets, warmup=self.opts.warmup_calls, key=key, timeout_s=self.ev.config.baseline_timeout_s)
            self.ev.baseline_cache.put(cached)
            hit = False
        else:
            hit = True
        self.result.timings["eager"] = cached.eager
        self.result.eager_us = cached.eager.median_us
        if cached.torch_compile is not None:
            self.result.timings["torch_compile"] = cached.torch_compile
            self.result.torch_compile_us = cached.torch_compile.median_us
        self.stage("baselines", ok=True, cached=hit, duration_s=time.monotonic() - t0,
                   log=f"torch.compile unavailable: {cached.compile_error}" if cached.compile_error else "")


def _fast_tmp() -> str | None:
    """/dev/shm when it is writable and allows executables (the child maps the .so from there)."""
    shm = "/dev/shm"
    if not (os.path.isdir(shm) and os.access(shm, os.W_OK)):
        return None
    return None if os.statvfs(shm).f_flag & os.ST_NOEXEC else shm


class _CandidateSession:
    """Drives one candidate child through verification and timing, judging each message."""

    def __init__(self, run: _Run, prepared: PreparedReference, work: str) -> None:
        self.run_ = run
        self.result = run.result
        self.prepared = prepared
        self.work = work
        self.marks: list[tuple[str, float]] = []
        self._events: list[tuple[str, float]] = []
        self.prints_asked: set[int] = set()
        self.prints_checked: set[int] = set()
        self.child: ChildProcess | None = None

    def marks_since(self, t0: float) -> list[tuple[str, float]]:
        return self.marks + [(name, at - t0) for name, at in self._events]

    async def run(self, verify: StageOutcome, child: ChildProcess) -> bool:
        self.child = child
        deadline = time.monotonic() + self.run_.opts.run_timeout_s
        try:
            while True:
                message = await child.receive(deadline)
                if message.get("event") == "timed":  # reveal the checked positions of that call
                    child.reply(print_seed=self.print_seed(message.get("k")))
                    continue
                verdict = self.handle(message, verify)
                if verdict is not None:
                    return verdict
        except ChildTimeout:
            fail(self.result, EvalStatus.TIMEOUT, f"the candidate did not finish within {self.run_.opts.run_timeout_s:.0f} s")
        except ChildEnded as exc:
            fail(self.result, EvalStatus.CRASH, f"the candidate process died ({describe_exit(exc.exitcode)})")
        finally:
            child.kill()
        verify.ok = False
        return False

    def handle(self, message: dict[str, Any], verify: StageOutcome) -> bool | None:
        event = message.get("event")
        if event != "print":
            self._events.append((f"{event}{message.get('k', '')}", time.monotonic()))
        if event == "ready":
            self.result.receipt.isolation = str(message.get("isolation", ""))
        elif event == "drawn":
            self.check_draws(message.get("digests"))
        elif event == "loaded":
            verify.log = f"weights loaded by name: {message.get('weights')}"
        elif event == "error":
            self.on_error(message, verify)
            return False
        elif event == "trial":
            return self.on_trial(message, verify)
        elif event == "print":
            return self.on_print(message)
        elif event == "timing":
            return self.on_timing(message)
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

    def on_trial(self, message: dict[str, Any], verify: StageOutcome) -> bool | None:
        k = int(message["k"])
        problems = list(message.get("violations") or []) + list(message.get("type_errors") or [])
        if message.get("input_mutated") and not self.prepared.reference_mutates_inputs:
            problems.append("forward modified its inputs in place")
        if problems:
            verify.ok = False
            fail(self.result, EvalStatus.VIOLATION, problems[0], problems)
            return False
        try:
            outputs = read_outputs(os.path.join(self.work, output_file(k)), message.get("layout"),
                                   self.run_.ev.device)
        except OutputFormatError as exc:
            verify.ok = False
            fail(self.result, EvalStatus.VIOLATION, f"trial {k}: {exc}", [str(exc)])
            return False
        mismatch = compare_outputs(outputs, self.prepared.trial_outputs[k], self.run_.atol, self.run_.rtol)
        if mismatch:
            verify.ok = False
            dist = self.prepared.trial_draws[k].distribution
            verify.log = f"trial {k} ({dist} inputs): {mismatch}"
            fail(self.result, EvalStatus.INCORRECT, f"wrong output on trial {k} ({dist} inputs): {mismatch}")
            return False
        trials = len(self.prepared.trial_draws)
        if k == trials - 1:
            verify.ok = True
            self.result.correct = True
            verify.log = (verify.log + f"\n{trials}/{trials} trials match").strip()
            if not self.prepared.timing_draws:
                return True
        return None

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
        got = message.get("fingerprint")
        if expected is not None and (not isinstance(got, list) or fingerprint_mismatch(got, *expected)):
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
        profile.log = (f"{len(stats.samples_us)} timed calls on fresh inputs; median {stats.median_us:.1f} us; "
                       f"host floor {message.get('host_floor_us', 0):.1f} us; timed by the host clock: "
                       f"{message.get('host_fallbacks', 0)}; L2 reset: {message.get('l2_reset')}; outside-process bound: "
                       + (f"{bound[0]:.1f} us (floor {bound[1]:.1f} us)" if bound else "unavailable"))
        return True


async def evaluate_job(job: EvalJob, config: EvaluatorConfig | None = None) -> EvalResult:
    """One-shot helper: evaluate `job` with a fresh embedded evaluator."""
    cfg = config or EvaluatorConfig(device=job.device)
    async with Evaluator(cfg) as evaluator:
        return await evaluator.evaluate(job)


__all__ = ["Evaluator", "EvaluatorConfig", "evaluate_job"]

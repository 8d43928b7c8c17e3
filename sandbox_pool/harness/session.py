"""One candidate child driven through verification and timing by the trusted worker.

The child pauses after each step; `CandidateSession` judges each message (trial outputs against the
reference, influence twins, the timed calls' fingerprints, the timing report) and lets the child
go on, sharing the device or with it alone (its timed calls), through the evaluation's lease.

Messages come from the candidate's process, so its code can forge them: each is validated against its
event's model where it arrives (messages.py), and only the protocol's order is accepted (`Protocol`),
each trial judged in turn, nothing of the timed phase before all passed.
The candidate's process can also hold the device's memory while it waits for a verdict: judging
then goes on on the CPU (`judge`), so what it did stays a verdict, never an infrastructure failure.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch

from cuda_agent.errors import DeviceMemoryError, InfraError, ProblemError
from cuda_agent.sandbox_pool.harness.clock import CPU_AGREEMENT, CPU_SLACK_US, too_fast
from cuda_agent.sandbox_pool.harness.compare import (
    compare_outputs,
    decode_prints,
    fingerprint_mismatch,
    influence_mismatch,
)
from cuda_agent.sandbox_pool.harness.inputs import same_digest
from cuda_agent.sandbox_pool.harness.messages import (
    ChildMessage,
    Drawn,
    Failed,
    Loaded,
    Print,
    Ready,
    Timed,
    Timing,
    Trial,
    log_number,
    parse,
)
from cuda_agent.sandbox_pool.harness.gate import Lease
from cuda_agent.sandbox_pool.harness.models import EvalOptions, EvalResult, EvalStatus, StageOutcome
from cuda_agent.sandbox_pool.harness.output_buffer import OutputRegion
from cuda_agent.sandbox_pool.harness.outputs import OutputFormatError, OutputMismatch, read_outputs
from cuda_agent.sandbox_pool.harness.protocol import output_file
from cuda_agent.sandbox_pool.harness.reference import PreparedReference, own_stream
from cuda_agent.sandbox_pool.harness.runner import ChildEnded, ChildProcess, ChildTimeout, describe_exit
from cuda_agent.sandbox_pool.harness.stats import timing_stats
from cuda_agent.sandbox_pool.harness.verdict import fail

POLL_S = 0.05
OUT_OF_MEMORY = torch.OutOfMemoryError.__name__
"""The type a child's error names when torch could not allocate on the device."""
"""How often a waiting session looks whether it was preempted."""
END_TIMEOUT_S = 10.0
"""How long the child's `done` may take after its last step (its harness sends it at once)."""

T = TypeVar("T")


def judge(device: str, fn: Callable[..., T], *args: Any) -> tuple[T, bool]:
    """`fn(device, *args)` on the evaluation's device (a stream of its own), or `fn("cpu", *args)` when
    the device has no memory left for it; returns the result and whether it came from the CPU.

    A candidate's child may hold nearly all of the device's memory while it waits for its verdict. An
    error here would end as an infrastructure failure (no reward: in training the sample is left out),
    so a wrong kernel that fills the device would escape its -1. The CPU reaches the same verdict: the
    comparisons are float64, exact on either."""
    try:
        return own_stream(device, fn, device, *args), False
    except RuntimeError as exc:  # torch.OutOfMemoryError, or a CUDA call's "out of memory"
        if not (isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()):
            raise
        return fn("cpu", *args), True


def on_device(values: list[Any], device: str) -> list[Any]:
    """`values` with their tensors on `device` (the same objects where they are there already)."""
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


class Protocol:
    """The order of a candidate child's messages (child/main.py); anything else is forged or broken.

    ready, calibrated, drawn, loaded, trial 0..n-1 in turn; then, when timed: ahead*, warm,
    (timed, print)* and timing. `error` may come at any point."""

    NEXT = {"start": {"ready"}, "ready": {"calibrated"}, "calibrated": {"drawn"}, "drawn": {"loaded"},
            "loaded": {"trial"}, "trial": {"trial"}, "trials passed": {"ahead", "warm"},
            "ahead": {"ahead", "warm"}, "warm": {"timed", "print", "timing"},
            "timed": {"timed", "print", "timing"}, "print": {"timed", "print", "timing"}}

    def __init__(self, trials: int) -> None:
        self.trials = trials
        self.state = "start"
        self.next_trial = 0

    def accept(self, event: str, k: int | None = None) -> str | None:
        """None if `event` may come now (the state moves on), else what was wrong."""
        if event == "error":
            return None
        if event not in self.NEXT.get(self.state, set()):
            return f"the evaluation protocol was not followed ('{event}' after '{self.state}')"
        if event == "trial":
            if k != self.next_trial:
                return f"the evaluation protocol was not followed (trial {k!r} when trial {self.next_trial} was due)"
            self.next_trial += 1
        self.state = event
        return None

    def before_candidate_code(self) -> bool:
        """No candidate code has run in the child yet (it is loaded after `drawn`): only then can an error
        be the harness's or the problem's (no reward) rather than the candidate's (-1)."""
        return self.state in ("start", "ready", "calibrated")

    def trial_passed(self) -> None:
        """The last trial passed (the session judged it): the timed phase may begin."""
        assert self.next_trial == self.trials, "called before the last trial"
        self.state = "trials passed"


@dataclass
class SessionSetting:
    """What a candidate session needs from its evaluation (evaluator.py), given to it: the session writes its
    verdict into `result` and the stages it decides through `stage`, and uses the device through `lease`."""

    device: str
    options: EvalOptions
    atol: float
    rtol: float
    result: EvalResult
    lease: Lease
    stage: Callable[..., StageOutcome]
    """`stage(name, **fields)`: the evaluation's outcome of stage `name`, recorded in `result`."""


class CandidateSession:
    """Drives one candidate child through verification and timing, judging each message.

    Besides the verdict in `setting.result`, it tells its evaluation whether a neighbour could have caused
    it (`neighbour_sensitive`: the timer's disagreement while other evaluations shared the device)."""

    def __init__(self, setting: SessionSetting, prepared: PreparedReference, work: str,
                 region: OutputRegion | None = None) -> None:
        self.setting = setting
        self.opts = setting.options
        self.region = region
        self.region_reads = self.file_reads = 0
        self.result = setting.result
        self.neighbour_sensitive = False
        self.prepared = prepared
        self.work = work
        self.marks: list[tuple[str, float]] = []
        self._events: list[tuple[str, float]] = []
        self.prints_asked: set[int] = set()
        self.prints_checked: set[int] = set()
        self.child: ChildProcess | None = None
        self.kept: dict[int, list[Any]] = {}  # the candidate's outputs on draws that influence twins perturb
        self.twin_outputs: list[Any] | None = None  # the candidate's outputs on the current twin
        self.timed_prints: dict[int, list[torch.Tensor]] = {}  # the candidate's prints of timed twins' bases
        self.influence_ratios: list[float] = []
        self.judged_on_cpu = 0  # judging steps the device had no memory for (`judge`)
        self.lease = setting.lease
        self.protocol = Protocol(len(prepared.trial_draws))
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
                deadline = start + self.opts.run_timeout_s + lease.waited_s
                if lease.mode != "exclusive":
                    lease.check_preempted()
                try:
                    message = parse(await child.receive(min(deadline, time.monotonic() + POLL_S)))
                except ChildTimeout:
                    if time.monotonic() < start + self.opts.run_timeout_s + lease.waited_s:
                        continue
                    raise
                wrong = message if isinstance(message, str) else self.protocol.accept(
                    message.event, getattr(message, "k", None))
                if wrong is not None:
                    verify.ok = False
                    fail(self.result, EvalStatus.VIOLATION, wrong, [wrong])
                    return False
                assert not isinstance(message, str)
                if isinstance(message, Timed):  # reveal the checked positions of that call
                    child.reply(print_seed=self.print_seed(message.k))
                    continue
                verdict = await self.handle(message, verify)
                if verdict is not None:
                    return verdict
        except ChildTimeout:
            fail(self.result, EvalStatus.TIMEOUT, f"the candidate did not finish within {self.opts.run_timeout_s:.0f} s")
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

    async def handle(self, message: ChildMessage, verify: StageOutcome) -> bool | None:
        event = message.event
        if event != "print":
            self._events.append((f"{event}{getattr(message, 'k', '')}", time.monotonic()))
        self.lease.on_child = False  # the child is paused (or gone) until we answer
        if isinstance(message, Ready):
            self.result.receipt.isolation = message.isolation
            await self._exclusive()  # the child calibrates its clock with the device to itself
            assert self.child is not None
            self.child.go(trial_draws=[d.model_dump() for d in self.prepared.trial_draws],
                          timing_draws=[d.model_dump() for d in self.prepared.timing_draws],
                          poison_bytes=self.prepared.output_nbytes,
                          outputs_may_alias_inputs=(self.prepared.reference_aliases_inputs
                                                    or self.prepared.reference_mutates_inputs),
                          output_region_bytes=self.region.nbytes if self.region is not None else 0)
        elif event == "calibrated":
            await self._go_on()
        elif isinstance(message, Drawn):
            self.check_draws(message.digests)
            await self._go_on()
        elif isinstance(message, Loaded):
            verify.log = f"weights loaded by name: {str(message.weights)[:2000]}"
            await self._go_on()
        elif isinstance(message, Failed):
            self.on_error(message, verify)
            return False
        elif isinstance(message, Trial):
            verdict = await self.on_trial(message, verify)
            if verdict is None:
                await self._go_on()
            return verdict
        elif event == "ahead":  # the child drew some of its timed calls' inputs ahead (a shared step)
            await self._go_on()
        elif event == "warm":
            await self._go_on(exclusive=True)
        elif isinstance(message, Print):
            return self.on_print(message)
        elif isinstance(message, Timing):
            verdict = self.on_timing(message)
            if verdict:  # the device still this child's alone: nothing it does until its end touches another's timing
                verdict = await self.ends_cleanly(None)
            self._end_exclusive()
            await self.lease.release()
            return verdict
        return None

    def check_draws(self, digests: list[Any]) -> None:
        """The child drew its trial inputs before loading any candidate code: a mismatch is the problem's."""
        expected = self.prepared.trial_digests
        if len(digests) != len(expected) or not all(
                same_digest(got, want) for got, want in zip(digests, expected)):
            raise ProblemError("get_inputs() gives different values in two processes under the same seeds; "
                               "the task needs reproducible inputs (seeded torch / random / numpy draws only)")

    def on_error(self, message: Failed, verify: StageOutcome) -> None:
        verify.ok = False
        detail = f"{message.kind}: {message.message}"
        verify.log = (verify.log + "\n" + message.traceback).strip()[-4000:]
        if message.stage in ("setup", "draw") and not self.protocol.before_candidate_code():
            # Claimed once candidate code could run: forged, to pass a wrong kernel off as no verdict.
            problem = (f"the evaluation protocol was not followed (a '{message.stage}' error after the "
                       "candidate's code was loaded)")
            fail(self.result, EvalStatus.VIOLATION, problem, [problem])
            return
        if message.stage in ("setup", "draw") and message.kind == OUT_OF_MEMORY:
            # before the candidate's code was loaded: the device was full, not the problem wrong (setup: the
            # child's context). The candidate's own out-of-memory stays its verdict (a crash), never infra_error.
            what = "starting" if message.stage == "setup" else "drawing the inputs"
            raise DeviceMemoryError(f"the evaluation child ran out of device memory {what}: {detail}")
        if message.stage == "setup":  # before the candidate's code was loaded
            raise InfraError(f"the evaluation child could not start: {detail}")
        if message.stage == "draw":
            raise ProblemError(f"get_inputs() failed in the evaluation child: {detail}")
        if message.violations:
            fail(self.result, EvalStatus.VIOLATION, message.violations[0], list(message.violations))
        elif message.stage in ("load", "construct"):
            fail(self.result, EvalStatus.LOAD_ERROR, f"model_new.py could not be loaded: {detail}")
        else:
            fail(self.result, EvalStatus.CRASH, f"the candidate raised during {message.stage}: {detail}")

    async def on_trial(self, message: Trial, verify: StageOutcome) -> bool | None:
        k = message.k  # the one due (`Protocol`)
        problems = [*message.violations, *message.type_errors]
        if message.input_mutated and not self.prepared.reference_mutates_inputs:
            problems.append("forward modified its inputs in place")
        if problems:
            verify.ok = False
            fail(self.result, EvalStatus.VIOLATION, problems[0], problems)
            return False
        try:  # in a thread: the other evaluations' sessions go on meanwhile
            mismatch = await asyncio.to_thread(self._check_trial, k, message.layout)
        except OutputFormatError as exc:
            verify.ok = False
            fail(self.result, EvalStatus.VIOLATION, f"trial {k}: {exc}", [str(exc)])
            return False
        if mismatch:
            verify.ok = False
            dist = self.prepared.trial_draws[k].distribution
            verify.log = f"trial {k} ({dist} inputs): {mismatch}" + self._cpu_note()
            fail(self.result, EvalStatus.INCORRECT, f"wrong output on trial {k} ({dist} inputs): {mismatch}")
            return False
        if not await self.check_influence(k, verify):
            return False
        trials = len(self.prepared.trial_draws)
        if k == trials - 1:
            self.protocol.trial_passed()
            verify.ok = True
            self.result.correct = True
            ratios = ", ".join(f"{r:.2g}" for r in self.influence_ratios)
            verify.log = (verify.log + f"\n{trials}/{trials} trials match"
                          + (f"; influence residuals {ratios}" if ratios else "") + self._cpu_note()).strip()
            if not self.prepared.timing_draws:
                await self._go_on()
                return await self.ends_cleanly(verify)
        return None

    async def ends_cleanly(self, verify: StageOutcome | None) -> bool:
        """Whether the child's next message is its `done`, which its harness sends straight after the last step.
        Anything else means the candidate's code sent messages of its own (say, a `timing` report of its choosing
        from inside its last timed call: the harness's own messages for that call would follow it)."""
        assert self.child is not None
        try:
            message = parse(await self.child.receive(time.monotonic() + END_TIMEOUT_S))
            event = "a malformed message" if isinstance(message, str) else message.event
        except ChildTimeout:
            event = "nothing"
        except ChildEnded:
            event = "an exit"
        if event == "done":
            return True
        problem = f"the evaluation protocol was not followed ({event!r} after the last step, where its end was due)"
        if verify is None:
            return self.timing_violation(problem)
        verify.ok = False
        fail(self.result, EvalStatus.VIOLATION, problem, [problem])
        return False

    def _check_trial(self, k: int, layout: list[Any]) -> str | None:
        (outputs, mismatch), on_cpu = judge(self.setting.device, self._read_and_compare, k, layout)
        self.judged_on_cpu += on_cpu
        if any(isinstance(entry, dict) and entry.get("shared") for entry in layout):
            self.region_reads += 1
        else:
            self.file_reads += 1
        if k in self.prepared.influence.values():  # a draw an influence twin perturbs
            self.kept[k] = outputs
        self.twin_outputs = outputs if k in self.prepared.influence else None
        return mismatch

    def _read_and_compare(self, device: str, k: int, layout: list[Any]) -> tuple[list[Any], str | None]:
        reference = self.prepared.trial_outputs[k]
        try:
            outputs = read_outputs(os.path.join(self.work, output_file(k)), layout, device, self.region, reference)
        except OutputMismatch as exc:  # other outputs than the reference's: wrong, and not read
            return [], str(exc)
        return outputs, compare_outputs(outputs, on_device(reference, device), self.setting.atol, self.setting.rtol,
                                        self.prepared.native_scales)

    def _cpu_note(self) -> str:
        if not self.judged_on_cpu:
            return ""
        return (f"\n{self.judged_on_cpu} judging step(s) ran on the CPU: the device had no memory left for them "
                "(the candidate's process held it)")

    async def check_influence(self, k: int, verify: StageOutcome) -> bool:
        """On an influence twin: did the candidate's output move as the reference's did?"""
        base = self.prepared.influence.get(k)
        if base is None or base not in self.kept or self.twin_outputs is None:
            return True
        twin = self.prepared.trial_draws[k]
        pairs = (self.kept[base], self.twin_outputs, self.prepared.trial_outputs[base], self.prepared.trial_outputs[k])

        def responses(device: str) -> tuple[str | None, list[float]]:
            return influence_mismatch(*(on_device(values, device) for values in pairs), twin.perturb_fraction)

        (mismatch, ratios), on_cpu = await asyncio.to_thread(judge, self.setting.device, responses)
        self.judged_on_cpu += on_cpu
        self.influence_ratios += ratios
        if mismatch:
            verify.ok = False
            verify.log = f"trial {k} (influence twin of trial {base}): {mismatch}" + self._cpu_note()
            fail(self.result, EvalStatus.INCORRECT, f"influence check failed on trial {k}: {mismatch}")
            return False
        return True

    def print_seed(self, k: int) -> int:
        if not 0 <= k < len(self.prepared.print_seeds) or k in self.prints_asked:
            return 0  # out of order: its print cannot match, the verdict follows
        self.prints_asked.add(k)
        return self.prepared.print_seeds[k]

    def on_print(self, message: Print) -> bool | None:
        k = message.k
        if not 0 <= k < len(self.prepared.timing_prints) or k in self.prints_checked:
            return self.timing_violation("the timing protocol was not followed")
        self.prints_checked.add(k)
        if message.signature != self.prepared.output_signature:  # every call, checked or not: it costs nothing
            return self.timing_violation(
                f"timed call {k} returned {_listed(message.signature)} where the reference returns "
                f"{_listed(self.prepared.output_signature)}: every call's outputs must keep the reference's dtypes "
                "and shapes (verification passed, so the kernel changed its outputs while timed)")
        expected = self.prepared.timing_prints[k]
        if expected is None:  # not one of the checked calls
            return None
        got = decode_prints(message.fingerprint)
        if got is None or fingerprint_mismatch(got, *expected):
            return self.timing_violation(f"the output of timed call {k} is wrong although verification passed "
                                         "(results cached or behaviour changed while timed)")
        if k in self.prepared.timed_twins.values():
            self.timed_prints[k] = got
        base = self.prepared.timed_twins.get(k)
        if base is not None and base in self.timed_prints:
            mismatch, ratios = influence_mismatch(self.timed_prints[base], got, *self.prepared.timed_twin_refs[k],
                                                  self.prepared.timing_draws[k].perturb_fraction)
            self.influence_ratios += ratios
            if mismatch:
                return self.timing_violation(f"timed call {k} (an influence twin of timed call {base}): {mismatch}; "
                                             "verification passed, so the kernel changed its behaviour while timed")
        return None

    def timing_violation(self, problem: str) -> bool:
        self.setting.stage("profile", ok=False)
        fail(self.result, EvalStatus.VIOLATION, problem, [problem])
        return False

    def on_timing(self, message: Timing) -> bool:
        problems = [*message.violations, *message.type_errors]
        if len(self.prints_checked) != len(self.prepared.timing_draws):
            problems.append("the timing protocol was not followed (timed outputs not all checked)")
        samples = message.samples_us if len(message.samples_us) == len(self.prepared.timing_draws) else None
        if samples is None:
            problems.append("the timing protocol was not followed (not one time per timed call)")
        assert self.child is not None
        self.child.clock.drain()
        tampered = self.child.clock.tampering(len(self.prepared.timing_draws))
        if tampered:
            problems.append(tampered)
        profile = self.setting.stage("profile", ok=not problems)
        if problems or samples is None:
            fail(self.result, EvalStatus.VIOLATION, problems[0], problems)
            return False
        stats = timing_stats(samples)
        bound = self.child.clock.bound()
        if bound is not None and too_fast(stats.median_us, bound):
            return self.timing_violation(
                f"the reported time ({stats.median_us:.1f} us per call) is far below what was observed from outside "
                f"the candidate's process ({bound[0]:.1f} us per call): the timer was tampered with or work was hidden")
        # Judged only where the stamps are read quietly (clock.py): read as they arrived, they let the parent
        # preempt the child inside the window, and an honest kernel in a depth-3 CPU pool showed 0.27.
        clock = self.child.clock
        agreement = clock.cpu_agreement(samples) if self.setting.device == "cpu" else None
        if clock.quiet and agreement is not None and agreement < CPU_AGREEMENT:
            self.neighbour_sensitive = True  # shared with other evaluations: confirmed by a solo run
            return self.timing_violation(
                f"every timed call reported at most {agreement:.0%} of the time observed from outside the candidate's "
                f"process ({CPU_SLACK_US:.0f} us of slack included; on a CPU both clocks bracket the same call): the "
                "timer was tampered with")
        self.result.timings["candidate"] = stats
        self.result.runtime_us = stats.median_us
        checked = sum(self.prepared.timing_prints[k] is not None for k in self.prints_checked)
        twins = sum(k in self.prints_checked for k in self.prepared.timed_twins)
        profile.log = (f"{len(stats.samples_us)} timed calls on fresh inputs, the outputs of {checked} checked "
                       f"(chosen at random, secret; {twins} of them influence twins of earlier calls); median {stats.median_us:.1f} us; "
                       f"host floor {log_number(message.host_floor_us):.1f} us; timed by the host clock: "
                       f"{str(message.host_fallbacks)[:20]}; L2 reset: {str(message.l2_reset)[:20]}; outside-process bound: "
                       + (f"{bound[0]:.1f} us (floor {bound[1]:.1f} us)" if bound else "unavailable")
                       + (f", best agreement of a call's two clocks {agreement:.3f}"
                          + (" (judged)" if clock.quiet else " (logged: stamps read as they arrived)")
                          if agreement is not None else "")
                       + f"; timed loop {log_number(message.wall_s):.3f} s, "
                       f"of which timed calls {sum(stats.samples_us) / 1e6:.3f} s" + split_log(message.split_s))
        return True


def _listed(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) and value else repr(value)[:80]


def split_log(split: Any) -> str:
    """The child's own account of its timed loop (untrusted: a log line, never a verdict)."""
    if not isinstance(split, dict):
        return ""
    try:
        parts = ", ".join(f"{name} {float(split[name]):.3f} s" for name in ("draws", "calls", "prints"))
        return f" ({parts}; waiting for the prints' positions {float(split['handshakes']):.3f} s)"
    except (KeyError, TypeError, ValueError):
        return ""

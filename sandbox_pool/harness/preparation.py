"""A candidate's reference, prepared in the trusted worker: ahead of its evaluation, and pausing for
other evaluations' timed windows (a pipelined worker's device is shared, gate.py).

`prepare_reference` runs `reference.prepare` in a worker thread on a CUDA stream of its own;
`gate_pause` is its pause between reference runs; `ReferenceAhead` starts it before the evaluation
reaches verification (the one-shot path: while the forkserver boots and the candidate compiles).
"""

from __future__ import annotations

import asyncio
import random
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from cuda_agent.sandbox_pool.harness.gate import DeviceGate, Lease
from cuda_agent.sandbox_pool.harness.models import EvalJob
from cuda_agent.sandbox_pool.harness.problem import Problem, load_problem
from cuda_agent.sandbox_pool.harness.reference import PreparedReference, own_stream, prepare
from cuda_agent.sandbox_pool.harness.workdir import new_work_folder

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.harness.early_child import EarlyChild


def draw_seed(fixed: int | None) -> int:
    return fixed if fixed is not None else random.randrange(1, 2**31 - 2**20)


def gate_pause(lease: Lease, loop: asyncio.AbstractEventLoop, device: str,
               stop: threading.Event | None = None) -> Callable[[], None]:
    """`reference.prepare`'s pause, for the worker thread that prepares under `lease` (held shared):
    while another evaluation's timed window waits for the device, finish this thread's queued
    device work, give the device up and take it again after the window. Without it, a timed window
    waited for whole preparations (then ~40 reference runs each; 0.7 s per evaluation with four in
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


async def prepare_reference(device: str, lease: Lease, problem: Problem, job: EvalJob, work: str,
                            seed: int, stop: threading.Event | None = None) -> PreparedReference:
    """`reference.prepare` for `job` in a worker thread, on a stream of its own (`own_stream`), pausing
    for other evaluations' timed windows (`gate_pause`); `lease` is held shared."""
    opts = job.options
    atol, rtol = opts.tolerances()
    return await asyncio.to_thread(
        own_stream, device, prepare, problem, work, device, seed=seed, trials=opts.correctness_trials,
        timed_calls=opts.timed_calls if opts.profile else 0, atol=atol, rtol=rtol,
        print_seed=secrets.randbits(62),  # the key of every call's print seed and of the checked calls: never sent
        influence_checks=opts.influence_checks, checked_calls=opts.checked_timed_calls,
        timed_influence_checks=opts.timed_influence_checks, scale_tolerance=opts.tolerance_follows_scale,
        pause=gate_pause(lease, asyncio.get_running_loop(), device, stop))


class ReferenceAhead:
    """One job's reference, prepared before its evaluation reaches verification (`Evaluator.prepare_ahead`).

    The one-shot path starts it as soon as the evaluator exists: the preparation (~1 s in a fresh
    process on the H200: CUDA's first kernels, cuBLAS, ~18 reference runs) then runs while the
    forkserver boots and the candidate compiles, instead of after both. It holds the device shared
    under a lease of its own (a baseline measurement waits for it, `gate_pause` lets one go first)
    and chooses the seed the evaluation's first attempt uses; a later attempt prepares afresh."""

    def __init__(self, gate: DeviceGate, device: str, job: EvalJob, *, work: str | None = None,
                 child: "EarlyChild | None" = None) -> None:
        self.seed = draw_seed(job.options.seed)
        self.work = work or new_work_folder()
        self._child = child  # a candidate child already started in `work` (early_child.py), or None
        self._taken = False
        self._stop = threading.Event()
        self.span: tuple[float, float] | None = None  # (began, ended) of the preparation, monotonic
        self.task: asyncio.Task[PreparedReference] = asyncio.ensure_future(self._prepare(gate, device, job))

    async def _prepare(self, gate: DeviceGate, device: str, job: EvalJob) -> PreparedReference:
        problem = load_problem(job.problem_src)
        lease = gate.lease()
        try:
            await lease.shared()
            began = time.monotonic()
            prepared = await prepare_reference(device, lease, problem, job, self.work, self.seed, self._stop)
            self.span = (began, time.monotonic())
            return prepared
        finally:
            await lease.close()

    async def take(self) -> PreparedReference:
        """The prepared reference (its failure is the evaluation's); the run owns `work` from now on."""
        self._taken = True
        return await self.task

    def take_child(self) -> "EarlyChild | None":
        """The candidate child started ahead, if any (once): the verification adopts it."""
        child, self._child = self._child, None
        return child

    def drop_child(self) -> None:
        """Kill the child started ahead, if any (the evaluation needs the device without it)."""
        child = self.take_child()
        if child is not None:
            child.discard()

    async def discard(self) -> None:
        """End an untaken preparation and remove its folder (an evaluation that stopped before verifying)."""
        self.drop_child()
        if self._taken:
            return
        self._taken = True
        self._stop.set()  # a running preparation stops at its next step; its lease holds the device till then
        await asyncio.wait({self.task})
        if not self.task.cancelled():
            self.task.exception()  # retrieved: nobody needs it
        shutil.rmtree(self.work, ignore_errors=True)

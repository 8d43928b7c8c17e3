"""Eager and torch.compile baselines: measured once per task, device and software stack.

Baselines run in a reference child with exactly the candidate's timing protocol and are
cached on disk as JSON keyed by (problem hash, device name, torch version, precision
policy, protocol version, number of timed calls).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cuda_agent.errors import InfraError
from cuda_agent.sandbox_pool.harness.models import TimingStats
from cuda_agent.sandbox_pool.harness.problem import Problem
from cuda_agent.sandbox_pool.harness.protocol import ChildSpec
from cuda_agent.sandbox_pool.harness.reference import timing_draws, write_baseline_files
from cuda_agent.sandbox_pool.harness.runner import ChildEnded, ChildProcess, ChildTimeout, Zygote
from cuda_agent.sandbox_pool.harness.stats import timing_stats

logger = logging.getLogger(__name__)

PROTOCOL_VERSION = "3"
BASELINE_SEED = 1234


class Baselines(BaseModel):
    model_config = ConfigDict(extra="forbid")

    eager: TimingStats
    torch_compile: TimingStats | None
    compile_error: str | None = None
    key: str


def baseline_key(problem: Problem, device_name: str, torch_version: str, tf32: bool, n_sets: int) -> str:
    parts = [problem.sha256, device_name, torch_version, f"tf32={tf32}", PROTOCOL_VERSION, str(n_sets)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


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


async def measure(problem: Problem, zygote: Zygote, *, device: str, device_index: int, tf32: bool, n_sets: int, warmup: int,
                  key: str, timeout_s: float) -> Baselines:
    """Time the reference eagerly and under torch.compile in fresh reference children."""
    work = tempfile.mkdtemp(prefix="cuda_agent_baseline_")
    try:
        await asyncio.to_thread(write_baseline_files, problem, work, BASELINE_SEED)
        eager = await _time_reference(zygote, problem, work, device, device_index, tf32, n_sets, warmup, False, timeout_s)
        if isinstance(eager, str):
            raise InfraError(f"eager baseline failed: {eager}")
        compiled = await _time_reference(zygote, problem, work, device, device_index, tf32, n_sets, warmup, True, timeout_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if isinstance(compiled, str):
        logger.warning("torch.compile baseline failed (%s); compile speed-up will be unavailable", compiled)
        return Baselines(eager=eager, torch_compile=None, compile_error=compiled, key=key)
    return Baselines(eager=eager, torch_compile=compiled, key=key)


async def _time_reference(zygote: Zygote, problem: Problem, work: str, device: str, device_index: int, tf32: bool, n_sets: int,
                          warmup: int, compiled: bool, timeout_s: float) -> TimingStats | str:
    spec = ChildSpec(role="reference", device=device, device_index=device_index, work_dir=work,
                     problem_src=problem.source, compile_reference=compiled, tf32=tf32,
                     timing_draws=timing_draws(BASELINE_SEED, n_sets),
                     warmup=max(warmup, 2), isolate=False)
    child = ChildProcess(zygote, spec)
    child.go()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            message = await child.receive(deadline)
            if message["event"] == "timing":
                return timing_stats(message["samples_us"])
            if message["event"] == "error":
                return f"{message['kind']}: {message['message']}"
    except ChildTimeout:
        return "timed out"
    except ChildEnded as exc:
        return str(exc)
    finally:
        child.kill()

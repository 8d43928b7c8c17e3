"""The agent's two cheap requests to a pool: build my kernels, profile my task's reference.

Both run on the trusted side (the process that owns the pool), so the skill scripts in a
sandbox import neither torch nor the compiler:

    compile            the candidate's kernels/ (after the static check of those files) built
                       into the pool's content-addressed cache; the sandbox sees that cache
                       read-only (docs/sandbox.md) and copies the module from it
    reference_profile  the reference's top operators under torch.profiler (SKILL.md's first
                       step), measured once per (task, device, software stack) in a child
                       process and cached as text under ``<cache>/reference_profiles/``
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import InfraError
from cuda_agent.sandbox_pool.harness.models import EvalJob
from cuda_agent.sandbox_pool.harness.result_cache import device_identity, stack_identity
from cuda_agent.sandbox_pool.harness.static_check import check_candidate

PROFILE_TIMEOUT_S = 600.0


class CompileReply(BaseModel):
    """The outcome of a ``compile`` request."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = Field(description="True if cuda_extension was built.")
    so_path: str | None = Field(None, description="The built module in the pool's cache (read-only to sandboxes).")
    log: str = Field("", description="Static-check problems or concise compiler diagnostics.")
    cached: bool = Field(False, description="Every unit and the link came from the cache.")
    duration_s: float = Field(0.0, description="Wall time of the build on the pool's side.")
    units_compiled: int = Field(0, description="Translation units compiled (cache misses).")


class ReferenceProfile(BaseModel):
    """The outcome of a ``reference_profile`` request."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="torch.profiler's table of the reference's top operators, or why it is unavailable.")
    cached: bool = Field(False, description="Served from the pool's cache.")
    duration_s: float = Field(0.0, description="Seconds the pool spent on it.")


async def compile_candidate(job: EvalJob, cache_dir: Path) -> CompileReply:
    """Statically check the job's kernel files, then build them into `cache_dir`."""
    from cuda_agent.sandbox_pool.harness.compiler import build_extension

    report = check_candidate(job.files)
    problems = [p for p in report.errors + report.violations if p.startswith("kernels/")]
    if problems:
        return CompileReply(ok=False, log="rejected by the static check (not compiled):\n" + "\n".join(problems))
    kernels = {k: v for k, v in job.files.items() if k.startswith("kernels/")}
    build = await build_extension(kernels, job.device, cache_dir=cache_dir, timeout_s=job.options.compile_timeout_s)
    if build.ok and build.expanded_violations:
        return CompileReply(ok=False, log="rejected after macro expansion (the build refuses it):\n"
                            + "\n".join(build.expanded_violations), duration_s=build.duration_s,
                            units_compiled=build.units_compiled)
    return CompileReply(ok=build.ok, so_path=build.so_path, log=build.log, cached=build.cached,
                        duration_s=build.duration_s, units_compiled=build.units_compiled)


def _profile_key(job: EvalJob) -> str:
    parts = [job.problem_src, device_identity(job.device), stack_identity(job.device)]
    return hashlib.sha256("\n\0".join(parts).encode()).hexdigest()[:24]


_locks: dict[str, asyncio.Lock] = {}


async def reference_profile(job: EvalJob, cache_dir: Path, device_index: int = 0) -> ReferenceProfile:
    """The cached profile of the job's reference, measured in a child process on a miss."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    key = _profile_key(job)
    path = Path(cache_dir) / "reference_profiles" / f"{key}.txt"
    async with _locks.setdefault(key, asyncio.Lock()):  # concurrent agents on one task: one measurement
        if path.is_file():
            return ReferenceProfile(text=path.read_text(), cached=True, duration_s=loop.time() - t0)
        text, ok = await _measure(job, device_index)
        if ok:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.replace(path)
    return ReferenceProfile(text=text, cached=False, duration_s=loop.time() - t0)


async def _measure(job: EvalJob, device_index: int) -> tuple[str, bool]:
    env = dict(os.environ)
    if job.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = _visible(device_index)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cuda_agent.sandbox_pool.pool.reference_profile_child", job.device,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True, env=env, cwd="/")
    try:
        async with asyncio.timeout(PROFILE_TIMEOUT_S):
            out, err = await proc.communicate(job.problem_src.encode())
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return f"[reference profile] unavailable: timed out after {PROFILE_TIMEOUT_S:.0f} s", False
    except asyncio.CancelledError:
        proc.kill()
        raise
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        if proc.returncode < 0:
            raise InfraError(f"the reference profiler died ({proc.returncode}): {' '.join(tail)}")
        return "[reference profile] unavailable: " + " ".join(tail), False
    return out.decode(errors="replace"), True


def _visible(device_index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if device_index < len(ids):
            return ids[device_index]
    return str(device_index)


__all__ = ["CompileReply", "ReferenceProfile", "compile_candidate", "reference_profile"]

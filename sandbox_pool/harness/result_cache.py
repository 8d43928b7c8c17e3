"""Results of unchanged candidates, reused by the one-shot path (``cuda-agent eval``).

A result is served again only for the same key, and the key holds everything that can
change a verdict or a timing (computed without importing torch, in milliseconds):

    candidate     sha256 of the candidate's files (paths and text)
    problem       sha256 of the reference source
    device        cpu / cuda, the CPU model or GPU names and driver, CUDA_VISIBLE_DEVICES
    settings      every EvalOptions field (seed included: None = "fresh") and the evaluator's
                  isolation and memory limit
    stack         torch's version file, python, the harness's own sources, the compilers
                  (path, size, mtime) and the compile-relevant environment
    baselines     the state of the baseline cache (name, size, mtime of every entry): a
                  refreshed baseline invalidates every cached result

Honesty: a cached result is the record of one real evaluation of exactly this candidate,
problem, device and stack, with the baselines of that moment; it is marked as served from
the cache (stage ``result_cache``). Only verdicts a re-run would not change are kept
(see `CACHEABLE`): infrastructure errors, time-outs and crashes are always re-run.
The reward of record (the pool's ``submit``, veRL's ``compute_score``) never reads this
cache: every reward draws fresh inputs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult, EvalStatus, StageOutcome

CACHE_FORMAT = "1"

CACHEABLE = frozenset({
    EvalStatus.OK, EvalStatus.STATIC_CHECK_FAILED, EvalStatus.COMPILE_ERROR, EvalStatus.LOAD_ERROR,
    EvalStatus.INCORRECT, EvalStatus.VIOLATION,
})
"""Verdicts worth serving again; the rest (infra_error, timeout, crash) may be transient."""

_HARNESS_ROOT = Path(__file__).resolve().parent
_SOURCE_ROOTS = (_HARNESS_ROOT, _HARNESS_ROOT.parent / "workspace" / "templates")
_ENV_KEYS = ("CXX", "CUDA_HOME", "CUDA_PATH", "CUDA_AGENT_CUDA_ARCH", "CUDA_VISIBLE_DEVICES")


def _sha(data: str | bytes) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def candidate_sha256(files: dict[str, str]) -> str:
    """The same hash as the evaluator's receipt (`Receipt.candidate_sha256`)."""
    return _sha(json.dumps(files, sort_keys=True))


def _file_id(path: str | None) -> str:
    if not path:
        return "none"
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return f"{path}:missing"
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _sources_sha() -> str:
    h = hashlib.sha256()
    for root in _SOURCE_ROOTS:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".cpp", ".h")
                           and "__pycache__" not in p.parts):
            h.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _torch_version_text() -> str:
    """torch/version.py (version, git hash, CUDA version) found without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return "no torch"
    return _read(str(Path(spec.origin).parent / "version.py"))


def device_identity(device: str) -> str:
    """The CPU model and core count, or the GPUs and driver as the NVIDIA driver reports them."""
    parts = [device, os.environ.get("CUDA_VISIBLE_DEVICES", "")]
    if device == "cuda":
        parts.append(_read("/proc/driver/nvidia/version"))
        gpus = Path("/proc/driver/nvidia/gpus")
        if gpus.is_dir():
            parts += [_read(str(p / "information")) for p in sorted(gpus.iterdir())]
    else:
        models = [line for line in _read("/proc/cpuinfo").splitlines() if line.startswith("model name")]
        parts += [models[0] if models else platform.processor(), str(len(os.sched_getaffinity(0)))]
    return "\n".join(parts)


def stack_identity(device: str) -> str:
    """The software that produced a result: torch, python, our harness, the compilers."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    parts = [_torch_version_text(), sys.version, _sources_sha(), _file_id(cxx)]
    if device == "cuda":
        parts.append(_file_id(shutil.which("nvcc")))
    parts += [f"{k}={os.environ.get(k, '')}" for k in _ENV_KEYS]
    return "\n".join(parts)


def _baselines_state(cache_dir: Path) -> str:
    root = cache_dir / "baselines"
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        entries = []  # absent and empty are the same state (the evaluator creates the folder)
    return _sha("\n".join(f"{e.name}:{e.stat().st_size}:{e.stat().st_mtime_ns}" for e in entries
                          if e.name.endswith(".json")))


def result_key(job: EvalJob, cache_dir: Path, evaluator_settings: dict[str, object]) -> str:
    """The cache key of `job` (see the module docstring for what it covers)."""
    parts = {
        "format": CACHE_FORMAT,
        "candidate": candidate_sha256(job.files),
        "problem": _sha(job.problem_src),
        "device": device_identity(job.device),
        "options": job.options.model_dump(mode="json"),
        "evaluator": evaluator_settings,
        "stack": _sha(stack_identity(job.device)),
        "baselines": _baselines_state(cache_dir),
    }
    return _sha(json.dumps(parts, sort_keys=True, default=str))[:32]


class ResultCache:
    """Results on disk under ``<cache_dir>/results/<key>.json`` (written atomically)."""

    def __init__(self, cache_dir: Path) -> None:
        self.root = Path(cache_dir) / "results"

    def get(self, key: str) -> EvalResult | None:
        """The cached result marked as such (stage ``result_cache``), or None."""
        path = self.root / f"{key}.json"
        try:
            record = json.loads(path.read_text())
            result = EvalResult.model_validate(record["result"])
        except (OSError, ValueError, KeyError):
            return None
        age = time.time() - float(record.get("stored_at", 0))
        result.stages["result_cache"] = StageOutcome(
            ran=True, ok=True, cached=True, duration_s=0.0,
            log=f"served from the result cache (evaluated {age:.0f} s ago; key {key}); "
                "`cuda-agent eval --no-cache` evaluates again")
        return result

    def put(self, key: str, result: EvalResult) -> bool:
        """Store `result` if its verdict is cacheable; False when it is not kept."""
        if result.status not in CACHEABLE:
            return False
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f"{key}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"stored_at": time.time(), "result": result.model_dump(mode="json")}))
            tmp.replace(self.root / f"{key}.json")
        except OSError:
            return False  # a read-only cache (inside a sandbox) only serves
        return True


__all__ = ["CACHEABLE", "ResultCache", "candidate_sha256", "device_identity", "result_key", "stack_identity"]

"""What of the host a sandbox sees: system folders, this interpreter and its venv, and limits.

The local backend shows the host's toolchain read-only; the docker test image does the
same through `DockerSandboxConfig.host_mounts` (`host_toolchain_mounts()`), so that g++
and the venv's python work in both without an image registry.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from cuda_agent.sandbox_pool.terminal.base import SandboxLimits

#: cuda_agent's import roots (setup.py maps each onto its own folder): an editable
#: install needs each of them visible inside the sandbox.
_PACKAGE_ROOTS = (
    "cuda_agent",
    "cuda_agent.sandbox_pool",
    "cuda_agent.tools",
    "cuda_agent.reward_fns",
    "cuda_agent.data_gen",
    "cuda_agent.recipe",
)


def python_paths() -> list[str]:
    """Host folders that make this interpreter, its venv and cuda_agent importable at the same paths."""
    paths = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), sys.prefix}
    for name in _PACKAGE_ROOTS:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            paths.add(os.path.realpath(location))
            paths.update(link_targets(location))
    # PYTHONPATH folders are part of how this interpreter imports (e.g. scripts/gpu-env.sh's wheels)
    paths.update(os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    return _outermost(p for p in paths if not p.startswith(("/usr/", "/etc/")) and os.path.isdir(p))


def link_targets(folder: str) -> set[str]:
    """The folders that `folder`'s symlinked entries live in: a package made as a link farm
    (scripts/gpu-env.sh) imports from there, so the sandbox must see them too."""
    targets: set[str] = set()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return targets
    for entry in entries:
        if entry.is_symlink():
            target = os.path.realpath(entry.path)
            targets.add(target if os.path.isdir(target) else os.path.dirname(target))
    return targets


def _outermost(paths) -> list[str]:
    """Drop paths that lie inside another one of the list."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def host_toolchain_mounts() -> dict[str, str]:
    """Host path -> same path, read-only: /usr, this venv and interpreter (the docker test image)."""
    mounts = {"/usr": "/usr"}
    for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.isdir(link) and not os.path.islink(link):
            mounts[link] = link  # a host without merged /usr
    mounts.update({p: p for p in python_paths()})
    return mounts


def sandbox_env(mount_point: str, extra: dict[str, str]) -> dict[str, str]:
    """Environment of a sandboxed command: a clean one, the venv first on PATH, this process's PYTHONPATH."""
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = {"HOME": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb", "PWD": mount_point, "SHELL": "/bin/bash"}
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
        path = f"{sys.prefix}/bin:{path}"
    env["PATH"] = path
    if os.environ.get("PYTHONPATH"):  # folders `python_paths` mounts: how this interpreter imports cuda_agent
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # (scripts/gpu-env.sh's link farm and wheels)
    env.update(extra)
    return env


def prlimit_argv(limits: SandboxLimits, nproc: bool = True) -> list[str]:
    """``prlimit`` prefix applying the per-process limits (soft = hard) to a command."""
    mib = 1024 * 1024
    argv = [
        "prlimit",
        f"--cpu={limits.cpu_time_s}",
        f"--as={limits.memory_mb * mib}",
        f"--fsize={limits.file_size_mb * mib}",
        "--core=0",
    ]
    if nproc:
        argv.append(f"--nproc={limits.max_processes}")
    return [*argv, "--"]


def ancestors(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b'] (folders a sandbox must create, world-readable, to mount at path)."""
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]

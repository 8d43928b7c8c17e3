"""Fixtures of the terminal-sandbox contract suite: one `make_sandbox` per backend.

Backends: `local` (bubblewrap), `local-unshare` (the fallback launcher) and `docker`
(marked `docker`). The docker fixture starts an engine when none answers
(docker/start_engine.sh, root only) and builds the test image without a registry
(docker/build_test_image.sh); if either fails the docker tests are skipped with the reason.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.terminal.base import SandboxLimits
from cuda_agent.sandbox_pool.terminal.config import DockerSandboxConfig, LocalSandboxConfig, create_sandbox
from cuda_agent.sandbox_pool.terminal.hostenv import host_toolchain_mounts

REPO = Path(__file__).resolve().parents[3]
TEST_IMAGE = "cuda-agent-sandbox-test:latest"

BACKENDS = [
    pytest.param("local", id="local"),
    pytest.param("local-unshare", id="local-unshare"),
    pytest.param("docker", id="docker", marks=pytest.mark.docker),
]


def _docker_ready() -> str | None:
    """None if an engine answers and the test image exists (starting / building them), else why not."""
    try:
        import docker
    except ImportError:
        docker = None
    if not hasattr(docker, "from_env"):  # absent, or the repository's docker/ folder shadowing it
        return "the Docker SDK is not installed (pip install 'docker>=7')"
    try:
        docker.from_env().ping()
    except docker.errors.DockerException:
        started = subprocess.run([str(REPO / "docker/start_engine.sh")], capture_output=True, text=True)
        if started.returncode != 0:
            return f"no Docker engine and docker/start_engine.sh failed: {started.stderr.strip()}"
    client = docker.from_env()
    try:
        client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        built = subprocess.run([str(REPO / "docker/build_test_image.sh"), TEST_IMAGE], capture_output=True, text=True)
        if built.returncode != 0:
            return f"docker/build_test_image.sh failed: {built.stderr.strip()}"
    return None


@pytest.fixture(scope="session")
def docker_image() -> str:
    reason = _docker_ready()
    if reason is not None:
        pytest.skip(f"docker engine unavailable: {reason}")
    return TEST_IMAGE


def sandbox_config(backend: str, limits: SandboxLimits, image: str | None = None):
    if backend == "local":
        return LocalSandboxConfig(launcher="bwrap", limits=limits)
    if backend == "local-unshare":
        return LocalSandboxConfig(launcher="unshare", limits=limits)
    return DockerSandboxConfig(image=image, host_mounts=host_toolchain_mounts(), limits=limits, cpus=1.0)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A CUDA-task workspace (docs/sandbox.md) with every protected entry present."""
    ws = tmp_path / "ws"
    (ws / "utils").mkdir(parents=True)
    (ws / "kernels").mkdir()
    (ws / "SKILL.md").write_text("# skill\n")
    (ws / "model.py").write_text("class Model: pass\n")
    (ws / "model_new.py").write_text("class ModelNew: pass\n")
    (ws / "binding.cpp").write_text("// binding\n")
    (ws / "binding_registry.h").write_text("// registry\n")
    (ws / "utils" / "compile.sh").write_text("echo compile\n")
    return ws


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    return request.param


@pytest.fixture
async def make_sandbox(backend: str, workspace: Path):
    """Factory: ``await make_sandbox(**limit_overrides, env=..., extra_ro_mounts=...)``, closed after the test."""
    made = []

    async def make(env=None, extra_ro_mounts=None, ws: Path | None = None, **limit_overrides):
        limits = SandboxLimits(**{"command_timeout_s": 60.0, **limit_overrides})
        config = sandbox_config(backend, limits, TEST_IMAGE)
        sandbox = create_sandbox(config, ws or workspace, env=env, extra_ro_mounts=extra_ro_mounts)
        made.append(sandbox)
        await sandbox.start()
        return sandbox

    yield make
    for sandbox in made:
        await sandbox.close()


def host_pids_with(marker: str) -> list[int]:
    """Pids (whole host) whose command line contains `marker`."""
    needle = marker.encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if needle in handle.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


async def wait_gone(marker: str, timeout_s: float = 10.0) -> list[int]:
    """Wait until no host process carries `marker`; returns the survivors (empty on success)."""
    deadline = time.monotonic() + timeout_s
    while (left := host_pids_with(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return left


@pytest.fixture
def leftover():
    """``await leftover(marker)``: host processes still carrying `marker` after a grace period."""
    return wait_gone


@pytest.fixture
def config_for(backend: str):
    """``config_for(**limit_overrides)``: the config of the current backend."""

    def build(**limit_overrides):
        return sandbox_config(backend, SandboxLimits(**{"command_timeout_s": 60.0, **limit_overrides}), TEST_IMAGE)

    return build

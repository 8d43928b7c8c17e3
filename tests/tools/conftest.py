"""Fixtures of the tool tests: a CUDA-style workspace and a sandbox per backend.

Every sandbox-using test runs on each backend: `host` (the contract test double in
host_sandbox.py, always available), `local` (the real bubblewrap backend, skipped until
cuda_agent.sandbox_pool.terminal.config exists) and `docker` (marked, skipped without the
backend or an engine).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from host_sandbox import HostSandbox

from cuda_agent.sandbox_pool.terminal.base import TerminalSandbox
from cuda_agent.tools import ToolSession, ToolsConfig
from cuda_agent.tools.sessions import SessionRegistry

MODEL_PY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return [2.0]
'''

WORKSPACE_FILES = {
    "SKILL.md": "# Skill\n",
    "model.py": MODEL_PY,
    "model_new.py": "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n",
    "binding.cpp": "// fixed\n",
    "binding_registry.h": "// fixed\n",
    "utils/compile.sh": "#!/bin/bash\necho compiled\n",
    "utils/verification.py": "print('ok')\n",
}


def make_workspace(root: Path) -> Path:
    """A small workspace with the CUDA task's layout (not a working one: see test_tools_e2e)."""
    for relative, content in WORKSPACE_FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    (root / "kernels").mkdir()
    return root


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws")


def _local(workspace: Path) -> TerminalSandbox:
    try:
        from cuda_agent.sandbox_pool.terminal.config import LocalSandboxConfig, create_sandbox
        from cuda_agent.sandbox_pool.terminal.local import LocalSandbox  # noqa: F401
    except ImportError:
        pytest.skip("the local terminal sandbox (cuda_agent.sandbox_pool.terminal.local) is not built yet")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    return create_sandbox(LocalSandboxConfig(), workspace)


def _docker(workspace: Path) -> TerminalSandbox:
    try:
        from cuda_agent.sandbox_pool.terminal.config import DockerSandboxConfig, create_sandbox
        from cuda_agent.sandbox_pool.terminal.docker import DockerSandbox  # noqa: F401
    except ImportError:
        pytest.skip("the docker terminal sandbox backend is not built yet")
    from cuda_agent.sandbox_pool.terminal.hostenv import host_toolchain_mounts

    try:
        import docker

        docker.from_env().images.get(DOCKER_TEST_IMAGE)
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable engine or image here
        pytest.skip(f"no Docker engine or no {DOCKER_TEST_IMAGE} image (docker/build_test_image.sh): {exc}")
    config = DockerSandboxConfig(image=DOCKER_TEST_IMAGE, host_mounts=host_toolchain_mounts())
    return create_sandbox(config, workspace)


DOCKER_TEST_IMAGE = "cuda-agent-sandbox-test:latest"
BACKENDS = ["host", "local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(params=BACKENDS)
async def sandbox(request: pytest.FixtureRequest, workspace: Path) -> AsyncIterator[TerminalSandbox]:
    factories = {"host": HostSandbox, "local": _local, "docker": _docker}
    box = factories[request.param](workspace)
    await box.start()
    try:
        yield box
    finally:
        await box.close()


@pytest.fixture
async def session(sandbox: TerminalSandbox) -> AsyncIterator[ToolSession]:
    tool_session = ToolSession(sandbox, ToolsConfig())
    yield tool_session
    await tool_session.close()


@pytest.fixture
async def registry() -> AsyncIterator[SessionRegistry]:
    fresh = SessionRegistry()
    yield fresh
    await fresh.close_all()

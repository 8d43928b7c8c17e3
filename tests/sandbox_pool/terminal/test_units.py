"""Backend-independent pieces: configs and the factory, path rules, globbing, output capping."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from cuda_agent.errors import SandboxError, ToolCallError
from cuda_agent.sandbox_pool.terminal.config import (
    DEFAULT_PROTECTED,
    DockerSandboxConfig,
    LocalSandboxConfig,
    SandboxConfig,
    create_sandbox,
)
from cuda_agent.sandbox_pool.terminal.files import is_protected, normalize
from cuda_agent.sandbox_pool.terminal.globbing import compile_glob
from cuda_agent.sandbox_pool.terminal.output import read_capped


def test_config_union_picks_backend_by_type():
    adapter = TypeAdapter(SandboxConfig)
    assert isinstance(adapter.validate_python({"type": "local"}), LocalSandboxConfig)
    docker = adapter.validate_python({"type": "docker", "image": "img", "limits": {"memory_mb": 512}})
    assert isinstance(docker, DockerSandboxConfig) and docker.limits.memory_mb == 512
    with pytest.raises(ValidationError):
        adapter.validate_python({"type": "local", "imag": "typo"})
    with pytest.raises(ValidationError):
        adapter.validate_python({"type": "podman"})


def test_factory_is_lazy_and_applies_options(tmp_path):
    code = (
        "import sys; from pathlib import Path;"
        "from cuda_agent.sandbox_pool.terminal import create_sandbox, DockerSandboxConfig, LocalSandboxConfig;"
        "import cuda_agent.sandbox_pool.terminal.cli;"
        "create_sandbox(LocalSandboxConfig(), Path('.'));"
        "print(sorted(m for m in ('docker', 'cuda_agent.sandbox_pool.terminal.docker') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip() == "[]"
    sandbox = create_sandbox(LocalSandboxConfig(env={"A": "1"}), tmp_path, env={"B": "2"})
    assert sandbox.protected == list(DEFAULT_PROTECTED)
    assert sandbox.env["A"] == "1" and sandbox.env["B"] == "2"


@pytest.mark.parametrize("path, norm", [("a/b.cu", "a/b.cu"), ("./a//b.cu", "a/b.cu"), ("a/../b", "b")])
def test_normalize_accepts_inside_paths(path, norm):
    assert normalize(path) == norm


@pytest.mark.parametrize("path", ["", "/abs", "..", "../x", "a/../../x", "a\0b"])
def test_normalize_refuses_escapes(path):
    with pytest.raises(ToolCallError):
        normalize(path)


def test_protection_covers_entries_and_below():
    protected = [p.strip("/") for p in DEFAULT_PROTECTED]
    for path in ("model.py", "utils", "utils/compile.sh", "SKILL.md"):
        assert is_protected(path, protected)
    for path in ("model_new.py", "utilsx/a", "kernels/model.py"):
        assert not is_protected(path, protected)


@pytest.mark.parametrize(
    "pattern, path, hit",
    [("**/*.cu", "kernels/a.cu", True), ("**/*.cu", "a.cu", True), ("*.cu", "kernels/a.cu", False),
     ("kernels/*", "kernels/a.cu", True), ("kernels/*", "kernels/x/a.cu", False),
     ("k?rnels/[ab].cu", "kernels/a.cu", True),
     ("**", "x/y/z", True), ("[!a].py", "a.py", False)],
)
def test_glob(pattern, path, hit):
    assert bool(compile_glob(pattern).match(path)) is hit


def test_read_capped_keeps_head_and_tail(tmp_path: Path):
    path = tmp_path / "out"
    path.write_bytes(b"H" * 100 + b"x" * 10_000 + b"T" * 100)
    text, truncated, end = read_capped(str(path), 200)
    assert truncated and text.startswith("H" * 100) and text.endswith("T" * 100) and end == 10_200
    assert read_capped(str(path), 200, offset=end) == ("", False, end)
    (tmp_path / "link").symlink_to(path)
    assert read_capped(str(tmp_path / "link"), 200) == ("", False, 0)  # never follows a planted symlink


def test_no_launcher_says_the_fix(monkeypatch, tmp_path):
    from cuda_agent.errors import SandboxUnavailableError
    from cuda_agent.sandbox_pool.terminal.launch import probe_launcher

    monkeypatch.setenv("PATH", str(tmp_path))
    probe_launcher.cache_clear()
    try:
        with pytest.raises(SandboxUnavailableError, match="install bubblewrap"):
            probe_launcher("auto", False)
    finally:
        probe_launcher.cache_clear()


async def test_unreachable_engine_says_the_fix(tmp_path):
    from cuda_agent.errors import SandboxUnavailableError

    sandbox = create_sandbox(DockerSandboxConfig(engine_url="unix:///nonexistent/docker.sock"), tmp_path)
    with pytest.raises(SandboxUnavailableError, match="start_engine.sh|Docker SDK"):
        await sandbox.start()
    with pytest.raises(SandboxError):
        await sandbox.run("true")


@pytest.mark.docker
async def test_missing_image_says_how_to_build_it(tmp_path, docker_image):
    from cuda_agent.errors import SandboxUnavailableError

    sandbox = create_sandbox(DockerSandboxConfig(image="cuda-agent-no-such-image:0"), tmp_path)
    with pytest.raises(SandboxUnavailableError, match="build_test_image.sh"):
        await sandbox.start()


def test_link_farm_targets_are_mounted(tmp_path, monkeypatch):
    """A package made of symlinks (scripts/gpu-env.sh's link farm under /tmp) imports from the links'
    targets: the sandbox must see those folders, and the PYTHONPATH folders, or `import cuda_agent` fails."""
    from cuda_agent.sandbox_pool.terminal import hostenv

    source = tmp_path / "repo"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "__init__.py").write_text("")
    (source / "sub").mkdir()
    farm = tmp_path / "farm"
    farm.mkdir()
    (farm / "__init__.py").symlink_to(source / "pkg" / "__init__.py")
    (farm / "sub").symlink_to(source / "sub")
    (farm / "plain.py").write_text("")
    assert hostenv.link_targets(str(farm)) == {str((source / "pkg").resolve()), str((source / "sub").resolve())}
    assert hostenv.link_targets(str(tmp_path / "missing")) == set()

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{tmp_path / 'absent'}")
    paths = hostenv.python_paths()
    assert str(site.resolve()) in paths
    assert str((tmp_path / "absent").resolve()) not in paths


async def test_bwrap_found_on_the_host_path_only(tmp_path, monkeypatch):
    """bwrap reachable only through the caller's PATH (a wrapper, as scripts/gpu-env.sh makes on the GPU
    node): the sandbox's holder, started with the sandbox's clean environment, must still find it."""
    import shutil

    from cuda_agent.sandbox_pool.terminal.launch import probe_launcher

    real = shutil.which("bwrap")
    if real is None:
        pytest.skip("bubblewrap is not installed")
    wrapper_dir, marker = tmp_path / "bin", tmp_path / "wrapper-used"
    wrapper_dir.mkdir()
    (wrapper_dir / "bwrap").write_text(f'#!/bin/sh\necho "$1" >> "{marker}"\nexec "{real}" "$@"\n')
    (wrapper_dir / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper_dir}:{os.environ['PATH']}")  # the host's PATH, not the sandbox's
    probe_launcher.cache_clear()
    ws = tmp_path / "ws"
    ws.mkdir()
    try:
        async with create_sandbox(LocalSandboxConfig(launcher="bwrap"), ws) as sandbox:
            result = await sandbox.run("echo inside")
    finally:
        probe_launcher.cache_clear()
    assert result.exit_code == 0 and result.stdout.strip() == "inside"
    assert "--die-with-parent" in marker.read_text().split()  # the holder's start, not only the probe's


async def test_the_callers_pythonpath_imports_inside_the_sandbox(tmp_path, monkeypatch):
    """A package importable here only through PYTHONPATH (scripts/gpu-env.sh on the GPU node) is importable
    by the sandbox's python too: its folder is mounted and the variable kept in the clean environment."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "only_on_pythonpath.py").write_text("VALUE = 42\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    ws = tmp_path / "ws"
    ws.mkdir()
    async with create_sandbox(LocalSandboxConfig(), ws) as sandbox:
        result = await sandbox.run("python -c 'import only_on_pythonpath as m; print(m.VALUE)'")
    assert result.exit_code == 0 and result.stdout.strip() == "42", result.stderr

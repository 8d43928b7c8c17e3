"""Glob and Grep, and the glob matcher they share."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.tools import ToolErrorKind, ToolSession, ToolsConfig, call_tool
from cuda_agent.sandbox_pool.terminal.globbing import glob_match


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.cu", "a.cu", True),
        ("*.cu", "kernels/a.cu", True),  # no '/': matches the file name
        ("kernels/*.cu", "kernels/a.cu", True),
        ("kernels/*.cu", "kernels/sub/a.cu", False),
        ("**/*.cu", "a.cu", True),
        ("**/*.cu", "x/y/a.cu", True),
        ("*.{cu,cpp}", "k/a.cpp", True),
        ("*.{cu,cpp}", "k/a.h", False),
        ("a?.[ch]", "ab.h", True),
        ("a[!b].c", "ab.c", False),
    ],
)
def test_glob_match(pattern: str, path: str, expected: bool) -> None:
    assert glob_match(pattern, path) is expected


@pytest.fixture
def sources(workspace: Path) -> Path:
    (workspace / "kernels/add.cu").write_text("__global__ void add(float* x) {\n  x[0] += 1;\n}\n")
    (workspace / "kernels/add_binding.cpp").write_text('#include "../binding_registry.h"\n// add binding\n')
    (workspace / "kernels/sub").mkdir()
    (workspace / "kernels/sub/mul.cu").write_text("__global__ void mul() {}\n")
    (workspace / "build.so").write_bytes(b"\x7fELF\x00 __global__")
    return workspace


async def test_glob_lists_sorted_relative_paths(session: ToolSession, sources: Path) -> None:
    obs = await call_tool(session, "Glob", {"pattern": "**/*.cu"})
    assert obs.text.splitlines() == ["kernels/add.cu", "kernels/sub/mul.cu"]
    obs = await call_tool(session, "Glob", {"pattern": "*.cu", "path": "kernels"})
    assert obs.text.splitlines() == ["kernels/add.cu"]
    obs = await call_tool(session, "Glob", {"pattern": "*.{cu,cpp}", "path": "kernels"})
    assert obs.text.splitlines() == ["kernels/add.cu", "kernels/add_binding.cpp"]
    obs = await call_tool(session, "Glob", {"pattern": "*.py"})
    assert "model.py" in obs.text and "utils/verification.py" not in obs.text


async def test_glob_empty_results_and_errors(session: ToolSession, sources: Path) -> None:
    obs = await call_tool(session, "Glob", {"pattern": "*.rs"})
    assert not obs.is_error and "No files match" in obs.text
    (sources / "empty").mkdir()
    assert not (await call_tool(session, "Glob", {"pattern": "*", "path": "empty"})).is_error
    obs = await call_tool(session, "Glob", {"pattern": "*", "path": "missing"})
    assert obs.error is ToolErrorKind.NOT_FOUND
    obs = await call_tool(session, "Glob", {"pattern": "../*"})
    assert obs.error is ToolErrorKind.BAD_PATH
    obs = await call_tool(session, "Glob", {"pattern": "*", "path": "/etc"})
    assert obs.error is ToolErrorKind.BAD_PATH


async def test_glob_caps_results(workspace: Path, sandbox) -> None:
    for i in range(12):
        (workspace / "kernels" / f"k{i:02}.cu").write_text("")
    session = ToolSession(sandbox, ToolsConfig(glob_max_results=5))
    obs = await call_tool(session, "Glob", {"pattern": "kernels/*.cu"})
    assert len(obs.text.splitlines()) == 6 and "7 more files" in obs.text


async def test_grep_modes(session: ToolSession, sources: Path) -> None:
    obs = await call_tool(session, "Grep", {"pattern": "__global__"})
    assert obs.text.splitlines() == ["kernels/add.cu", "kernels/sub/mul.cu"]  # binary build.so skipped
    obs = await call_tool(session, "Grep", {"pattern": "x", "output_mode": "count", "glob": "*.cu"})
    assert obs.text.splitlines() == ["kernels/add.cu:2"]
    obs = await call_tool(session, "Grep", {"pattern": "X\\[0\\]", "output_mode": "content", "-i": True})
    assert obs.text == "kernels/add.cu:2:  x[0] += 1;"
    obs = await call_tool(session, "Grep", {"pattern": "x\\[0\\]", "output_mode": "content", "-n": False})
    assert obs.text == "kernels/add.cu:  x[0] += 1;"


async def test_grep_context_and_head_limit(session: ToolSession, sources: Path) -> None:
    obs = await call_tool(session, "Grep", {"pattern": "\\+=", "output_mode": "content", "-C": 1})
    assert obs.text.splitlines() == [
        "kernels/add.cu-1-__global__ void add(float* x) {",
        "kernels/add.cu:2:  x[0] += 1;",
        "kernels/add.cu-3-}",
    ]
    obs = await call_tool(session, "Grep", {"pattern": "\\+=", "output_mode": "content", "-B": 1, "-A": 0})
    assert len(obs.text.splitlines()) == 2
    obs = await call_tool(session, "Grep", {"pattern": ".", "output_mode": "content", "head_limit": 2})
    assert len(obs.text.splitlines()) == 3 and "head_limit=2" in obs.text


async def test_grep_path_glob_and_errors(session: ToolSession, sources: Path) -> None:
    obs = await call_tool(session, "Grep", {"pattern": "void", "path": "kernels/sub"})
    assert obs.text == "kernels/sub/mul.cu"
    obs = await call_tool(session, "Grep", {"pattern": "void", "path": "kernels/add.cu"})
    assert obs.text == "kernels/add.cu"
    obs = await call_tool(session, "Grep", {"pattern": "binding", "glob": "*.{cpp,h}"})
    assert obs.text == "kernels/add_binding.cpp"
    obs = await call_tool(session, "Grep", {"pattern": "nothing-here"})
    assert not obs.is_error and "No matches" in obs.text
    obs = await call_tool(session, "Grep", {"pattern": "add("})
    assert obs.error is ToolErrorKind.INVALID_PATTERN and "backslash" in obs.text
    obs = await call_tool(session, "Grep", {"pattern": "x", "path": "../"})
    assert obs.error is ToolErrorKind.BAD_PATH
    obs = await call_tool(session, "Grep", {"pattern": "x", "output_mode": "lines"})
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS and "content" in obs.text

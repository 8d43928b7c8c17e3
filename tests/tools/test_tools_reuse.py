"""examples/tools_reuse: the tools in a plain coding task, loaded by veRL's own loader."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl", reason="veRL is not installed")

pytestmark = pytest.mark.verl

EXAMPLE = Path(__file__).parents[2] / "examples/tools_reuse"


def _demo():
    spec = importlib.util.spec_from_file_location("tools_reuse_demo", EXAMPLE / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(tmp_path: Path, backend: str) -> Path:
    config = yaml.safe_load((EXAMPLE / "tools.yaml").read_text())
    if backend == "host":
        for entry in config["tools"]:
            entry["config"]["sandbox_factory"] = "host_sandbox:host_sandbox"
    else:
        pytest.importorskip("cuda_agent.sandbox_pool.terminal.local", reason="the local sandbox is not built yet")
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("backend", ["host", "local"])
async def test_demo_fixes_the_bug_through_the_tools(tmp_path: Path, backend: str) -> None:
    transcript = await _demo().run_demo(_config(tmp_path, backend))
    names = [name for name, _ in transcript]
    assert names == ["Glob", "Bash", "Read", "Edit", "Write", "Bash"]
    texts = [text for _, text in transcript]
    assert texts[0].splitlines() == ["fizzbuzz.py", "tests/test_fizzbuzz.py"]
    assert "AssertionError" in texts[1] and "[exit code 1]" in texts[1]
    assert texts[2].startswith("     1\tdef fizzbuzz(n):")
    assert "1 replacement" in texts[3]
    assert "protected" in texts[4]  # the task's tests cannot be rewritten
    assert texts[5] == "all tests pass"


def test_example_row_carries_create_kwargs_as_json_text() -> None:
    row = _demo().example_row()
    create = row["extra_info"]["tools_kwargs"]["sandbox"]["create_kwargs"]
    assert isinstance(create["files"], str)

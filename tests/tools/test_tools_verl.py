"""The tools inside veRL 0.9.1: its YAML loader, its ToolAgentLoop._call_tool, its AgentData."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

pytest.importorskip("verl", reason="veRL is not installed")

from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop  # noqa: E402
from verl.experimental.agent_loop.tool_parser import FunctionCall  # noqa: E402
from verl.tools.tool_registry import initialize_tools_from_config  # noqa: E402

from cuda_agent.tools import sessions, tool_schemas  # noqa: E402
from host_sandbox import HostSandbox  # noqa: E402

pytestmark = pytest.mark.verl

from cuda_agent.tools.config import TOOLS_YAML as SHIPPED  # noqa: E402


@pytest.fixture(autouse=True)
async def clean_registry():
    yield
    await sessions.default_registry().close_all()


def _config(tmp_path: Path, backend: str = "host", **extra: Any) -> Path:
    """The shipped YAML, with the test sandbox factory for backend 'host'."""
    if backend == "local":
        pytest.importorskip("cuda_agent.sandbox_pool.terminal.local", reason="the local sandbox is not built yet")
    else:
        extra["sandbox_factory"] = "host_sandbox:host_sandbox"
    config = yaml.safe_load(SHIPPED.read_text())
    for entry in config["tools"]:
        entry["config"] = {**entry["config"], **extra}
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _loop(tools: list) -> SimpleNamespace:
    """What ToolAgentLoop._call_tool reads from `self`."""
    return SimpleNamespace(
        tools={tool.name: tool for tool in tools},
        max_tool_response_length=100_000,
        tool_response_truncate_side="middle",
    )


def _agent_data(request_id: str, tools_kwargs: dict[str, Any]) -> AgentData:
    return AgentData(
        messages=[], image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None,
        metrics={}, request_id=request_id, tools_kwargs=tools_kwargs,
    )


async def _call(loop: SimpleNamespace, agent_data: AgentData, name: str, args: dict[str, Any] | str) -> str:
    arguments = args if isinstance(args, str) else json.dumps(args)
    response, reward, _ = await ToolAgentLoop._call_tool(
        loop, FunctionCall(name=name, arguments=arguments), agent_data.tools_kwargs, agent_data
    )
    assert reward == 0.0
    return response.text


def test_shipped_yaml_loads_with_complete_schemas() -> None:
    tools = initialize_tools_from_config(str(SHIPPED))
    assert [t.name for t in tools] == [s["function"]["name"] for s in tool_schemas()]
    dumped = {t.name: t.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for t in tools}
    assert dumped["MultiEdit"]["function"]["parameters"]["properties"]["edits"]["items"]["required"] == [
        "old_string", "new_string"
    ]
    assert "items" in dumped["TodoWrite"]["function"]["parameters"]["properties"]["todos"]
    assert dumped == {s["function"]["name"]: s for s in tool_schemas()}
    # the typed view veRL's parsers read still works
    assert tools[6].tool_schema.function.parameters.properties["edits"].type == "array"


@pytest.mark.parametrize("backend", ["host", "local"])
async def test_lazy_session_per_trajectory_from_a_template(tmp_path: Path, workspace: Path, backend: str) -> None:
    loop = _loop(initialize_tools_from_config(str(_config(tmp_path, backend))))
    kwargs = {"sandbox": {"create_kwargs": {"template_dir": str(workspace)}}}
    first, second = _agent_data("same-id", kwargs), _agent_data("same-id", kwargs)
    assert "Created kernels/a.cu" in await _call(loop, first, "Write", {"file_path": "kernels/a.cu", "content": "A"})
    assert (await _call(loop, first, "Read", {"file_path": "kernels/a.cu"})) == "     1\tA"
    assert "does not exist" in await _call(loop, second, "Read", {"file_path": "kernels/a.cu"})
    assert not (workspace / "kernels/a.cu").exists()  # the template is never modified
    registry = sessions.default_registry()
    assert len(registry) == 2
    session = next(iter(registry._entries.values())).session
    fresh = session.workspace
    assert fresh.is_dir() and fresh != workspace and (fresh / "kernels/a.cu").read_text() == "A"
    del first
    gc.collect()
    for _ in range(200):
        await asyncio.sleep(0.02)
        if len(registry) == 1 and not fresh.exists():
            break
    assert len(registry) == 1 and not fresh.exists()  # released at the end of the trajectory


async def test_errors_reach_the_model_through_verl(tmp_path: Path, workspace: Path) -> None:
    loop = _loop(initialize_tools_from_config(str(_config(tmp_path))))
    data = _agent_data("r", {"sandbox": {"create_kwargs": {"template_dir": str(workspace)}}})
    assert "missing required argument 'old_string'" in await _call(loop, data, "Edit", {"file_path": "model_new.py"})
    assert "protected" in await _call(loop, data, "Write", {"file_path": "model.py", "content": ""})
    assert "Unknown function" in await _call(loop, data, "Nope", {})  # veRL's own check


async def test_owner_bound_session_wins(tmp_path: Path, workspace: Path) -> None:
    loop = _loop(initialize_tools_from_config(str(_config(tmp_path))))
    sandbox = HostSandbox(workspace)
    await sandbox.start()
    session = sessions.bind("owned-request", sandbox)
    data = _agent_data("owned-request", {})
    await _call(loop, data, "Write", {"file_path": "kernels/b.cu", "content": "B"})
    assert (workspace / "kernels/b.cu").read_text() == "B" and session.calls == 1
    assert sessions.unbind("owned-request") is session
    await sandbox.close()


async def test_files_seed_and_tool_specific_create_kwargs(tmp_path: Path) -> None:
    loop = _loop(initialize_tools_from_config(str(_config(tmp_path, tools={"protected_paths": []}))))
    kwargs = {"Read": {"create_kwargs": {"files": json.dumps({"task.md": "hello"})}}}
    assert await _call(loop, _agent_data("x", kwargs), "Read", {"file_path": "task.md"}) == "     1\thello"


async def test_cuda_workspace_from_problem_src(tmp_path: Path) -> None:
    from conftest import MODEL_PY

    loop = _loop(initialize_tools_from_config(str(_config(tmp_path))))
    data = _agent_data("p", {"sandbox": {"create_kwargs": {"problem_src": MODEL_PY, "device": "cpu"}}})
    assert "Glob" in await _call(loop, data, "Read", {"file_path": "SKILL.md", "limit": 400})
    edit = {"file_path": "model.py", "old_string": "a", "new_string": "b"}
    assert "protected" in await _call(loop, data, "Edit", edit)
    assert "model_new.py" in await _call(loop, data, "Glob", {"pattern": "*.py"})


async def test_bad_sandbox_options_are_a_config_error(tmp_path: Path) -> None:
    from cuda_agent.errors import ConfigError
    from cuda_agent.tools.provision import SandboxToolConfig, make_sandbox

    with pytest.raises(ConfigError, match="sandbox_options"):
        make_sandbox(SandboxToolConfig(sandbox_options={"imag": "x"}), tmp_path)


async def test_bad_create_kwargs_are_a_config_error(tmp_path: Path) -> None:
    loop = _loop(initialize_tools_from_config(str(_config(tmp_path))))
    text = await _call(loop, _agent_data("x", {"sandbox": {"create_kwargs": {"wokspace": "/x"}}}), "Glob",
                       {"pattern": "*"})
    assert text.startswith("Error executing tool 'Glob'") and "wokspace" in text

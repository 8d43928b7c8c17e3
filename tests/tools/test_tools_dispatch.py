"""call_tool's handling of malformed calls, and the schemas the model sees."""

from __future__ import annotations

import json

import pytest

from cuda_agent.tools import ToolErrorKind, ToolSession, call_tool, tool_names, tool_schemas
from cuda_agent.tools.args import EditOp, TodoItem
from cuda_agent.tools.registry import get_tool

TOOLS = ["Bash", "BashOutput", "KillBash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "TodoWrite"]


async def test_unknown_tool_suggests_the_right_name(session: ToolSession) -> None:
    obs = await call_tool(session, "bash", {"command": "ls"})
    assert obs.is_error and obs.error is ToolErrorKind.UNKNOWN_TOOL and "Did you mean 'Bash'?" in obs.text
    obs = await call_tool(session, "NotebookEdit", {})
    assert obs.error is ToolErrorKind.UNKNOWN_TOOL and "Available tools: Bash" in obs.text
    assert session.errors["unknown_tool"] == 2 and session.calls == 2


@pytest.mark.parametrize("arguments", ['{"file_path": "model.py"', "[1, 2]", '"model.py"', "{'file_path': 'x'}"])
async def test_malformed_json_is_an_observation(session: ToolSession, arguments: str) -> None:
    obs = await call_tool(session, "Read", arguments)
    assert obs.is_error and obs.error is ToolErrorKind.INVALID_JSON and "JSON object" in obs.text


async def test_json_text_arguments_work(session: ToolSession) -> None:
    obs = await call_tool(session, "Read", json.dumps({"file_path": "model.py", "limit": 1}))
    assert obs.text.startswith("     1\timport torch")


async def test_missing_extra_and_mistyped_arguments(session: ToolSession) -> None:
    obs = await call_tool(session, "Read", "")
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS and "missing required argument 'file_path'" in obs.text
    assert "Read takes (file_path: string, offset?: integer, limit?: integer)" in obs.text
    obs = await call_tool(session, "Read", {"path": "model.py"})
    assert "unknown argument 'path' (did you mean 'file_path'?)" in obs.text
    obs = await call_tool(session, "Read", {"file_path": "model.py", "limit": "many"})
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS and "'limit'" in obs.text
    obs = await call_tool(session, "Read", {"file_path": "model.py", "offset": 0})
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS and "greater than or equal to 1" in obs.text
    obs = await call_tool(session, "Write", {"file_path": "a.py", "content": 12})
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS and "'content'" in obs.text
    obs = await call_tool(session, "Bash", {"command": ""})
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS


async def test_every_call_reports_duration(session: ToolSession) -> None:
    for name, args in [("Glob", {"pattern": "*"}), ("Nope", {}), ("Read", "{")]:
        assert (await call_tool(session, name, args)).metrics["duration_s"] >= 0


def test_schemas_cover_every_tool_in_order() -> None:
    assert tool_names() == TOOLS
    assert [s["function"]["name"] for s in tool_schemas()] == TOOLS
    assert [s["function"]["name"] for s in tool_schemas(["Read", "Bash"])] == ["Read", "Bash"]


@pytest.mark.parametrize("name", TOOLS)
def test_schema_matches_the_argument_model(name: str) -> None:
    (schema,) = tool_schemas([name])
    model_schema = get_tool(name).args_model.model_json_schema(by_alias=True)
    params = schema["function"]["parameters"]
    assert set(params["properties"]) == set(model_schema["properties"])
    assert set(params["required"]) == set(model_schema.get("required", []))
    for prop in params["properties"].values():
        assert prop["description"]


def test_array_schemas_keep_items_and_nested_properties() -> None:
    by_name = {s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas()}
    edits = by_name["MultiEdit"]["properties"]["edits"]
    assert edits["type"] == "array" and set(edits["items"]["properties"]) == set(EditOp.model_fields)
    todos = by_name["TodoWrite"]["properties"]["todos"]
    assert set(todos["items"]["properties"]) == set(TodoItem.model_fields)
    assert todos["items"]["properties"]["status"]["enum"] == ["pending", "in_progress", "completed"]


def test_tool_schemas_returns_copies() -> None:
    tool_schemas()[0]["function"]["name"] = "changed"
    assert tool_schemas()[0]["function"]["name"] == "Bash"

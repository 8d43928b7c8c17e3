"""`cuda-agent tool`: one call, the observation on stdout, exit status 1 for error observations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cuda_agent.tools.cli import register

FACTORY = ["--sandbox-factory", "host_sandbox:host_sandbox"]


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:  # keeps `tool` a named subcommand
        """Test app."""

    return app


def test_tool_command_runs_one_call(workspace: Path) -> None:
    arguments = '{"file_path": "model.py", "limit": 1}'
    result = CliRunner().invoke(_app(), ["tool", str(workspace), "Read", arguments, *FACTORY])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("     1\timport torch\n") and "continue with offset=2" in result.output


def test_tool_command_error_observation_and_json(workspace: Path) -> None:
    result = CliRunner().invoke(
        _app(), ["tool", str(workspace), "Write", '{"file_path": "model.py", "content": ""}', "--json", *FACTORY]
    )
    assert result.exit_code == 1
    observation = json.loads(result.output)
    assert observation["is_error"] and observation["error"] == "protected_path"


def test_tool_command_on_the_local_sandbox(workspace: Path) -> None:
    pytest.importorskip("cuda_agent.sandbox_pool.terminal.local", reason="the local sandbox is not built yet")
    result = CliRunner().invoke(_app(), ["tool", str(workspace), "Bash", '{"command": "pwd; ls model.py"}'])
    assert result.exit_code == 0, result.output
    assert result.output == "/workspace\nmodel.py\n"


def test_tool_command_rejects_unknown_backend(workspace: Path) -> None:
    result = CliRunner().invoke(_app(), ["tool", str(workspace), "Read", "{}", "--backend", "podman"])
    assert result.exit_code == 2


def test_tool_is_mounted_on_the_main_cli() -> None:
    pytest.importorskip("cuda_agent.cli.workspace_cmds", reason="the main CLI's other commands are not written yet")
    from cuda_agent.cli.main import app

    result = CliRunner().invoke(app, ["tool", "--help"])
    assert result.exit_code == 0 and "JSON" in result.output

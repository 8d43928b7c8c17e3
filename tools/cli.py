"""`cuda-agent tool DIR NAME 'JSON-ARGS'`: one tool call on a workspace's sandbox, as the model makes it.

For reproducing a trajectory step. One call per invocation: the sandbox is closed when the
command ends, so background jobs end with it. Light at import (typer only).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from cuda_agent.tools.observation import ToolObservation


def register(app: typer.Typer) -> None:
    """Mount the `tool` command on the top-level app."""
    app.command("tool", help="Run one agent tool call on a workspace's sandbox and print the observation.")(tool)


def tool(
    workspace: Path = typer.Argument(..., exists=True, file_okay=False, help="The workspace directory."),
    name: str = typer.Argument(..., help="Tool name: Bash, Read, Write, Edit, MultiEdit, Glob, Grep, TodoWrite, ..."),
    arguments: str = typer.Argument("{}", help="The call's arguments as one JSON object."),
    backend: str = typer.Option("local", "--backend", help="Terminal sandbox backend: local or docker."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole observation as JSON."),
    sandbox_factory: str = typer.Option(
        "", "--sandbox-factory", hidden=True, help="'module:function' building the sandbox (tests)."
    ),
) -> None:
    """Exit status 0 when the call was carried out, 1 when the observation is an error, 2 without a sandbox."""
    if backend not in ("local", "docker"):
        raise typer.BadParameter("use local or docker", param_hint="--backend")
    from cuda_agent.errors import CudaAgentError

    try:
        observation = asyncio.run(_run(workspace, name, arguments, backend, sandbox_factory or None))
    except CudaAgentError as exc:  # no usable sandbox here: not a tool observation
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(observation.model_dump_json(indent=2) if as_json else observation.text)
    raise typer.Exit(1 if observation.is_error else 0)


async def _run(workspace: Path, name: str, arguments: str, backend: str, factory: str | None) -> ToolObservation:
    from cuda_agent.tools.dispatch import call_tool
    from cuda_agent.tools.provision import SandboxToolConfig, make_sandbox
    from cuda_agent.tools.session import ToolSession

    config = SandboxToolConfig(backend=backend, sandbox_factory=factory)
    sandbox = make_sandbox(config, workspace.resolve())
    await sandbox.start()
    session = ToolSession(sandbox, config.tools)
    try:
        return await call_tool(session, name, arguments)
    finally:
        await session.close()
        await sandbox.close()

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
    image: str | None = typer.Option(None, "--image", help="Docker image (docker backend); default "
                                     "cuda-agent-compile:latest; docker/build_test_image.sh builds "
                                     "cuda-agent-sandbox-test:latest (use it with --host-toolchain)."),
    host_toolchain: bool = typer.Option(False, "--host-toolchain", help="docker: mount the host's /usr and this "
                                        "venv read-only (what the test image needs)."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole observation as JSON."),
    sandbox_factory: str = typer.Option(
        "", "--sandbox-factory", hidden=True, help="'module:function' building the sandbox (tests)."
    ),
) -> None:
    """Exit status 0 when the call was carried out, 1 when the observation is an error, 2 for a usage
    error, 3 when no sandbox can run here (docker engine, image)."""
    if backend not in ("local", "docker"):
        raise typer.BadParameter("use local or docker", param_hint="--backend")
    options: dict = {}
    if image:
        options["image"] = image
    if host_toolchain:
        from cuda_agent.sandbox_pool.terminal.hostenv import host_toolchain_mounts

        options["host_mounts"] = host_toolchain_mounts()
    observation = asyncio.run(_run(workspace, name, arguments, backend, sandbox_factory or None, options))
    typer.echo(observation.model_dump_json(indent=2) if as_json else observation.text)
    raise typer.Exit(1 if observation.is_error else 0)


async def _run(workspace: Path, name: str, arguments: str, backend: str, factory: str | None,
               sandbox_options: dict | None = None) -> ToolObservation:
    from cuda_agent.tools.dispatch import call_tool
    from cuda_agent.tools.provision import SandboxToolConfig, make_sandbox
    from cuda_agent.tools.session import ToolSession

    config = SandboxToolConfig(backend=backend, sandbox_factory=factory, sandbox_options=sandbox_options or {})
    sandbox = make_sandbox(config, workspace.resolve())
    await sandbox.start()
    session = ToolSession(sandbox, config.tools)
    try:
        return await call_tool(session, name, arguments)
    finally:
        await session.close()
        await sandbox.close()

"""``cuda-agent sandbox``: run a command in the sandbox an agent would get on a workspace.

Light at import: the backends (and the Docker SDK) load inside the command.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from cuda_agent.cli.contract import ContractGroup

app = typer.Typer(
    help="Terminal sandboxes (local namespaces, docker): reproduce what a model saw.",
    no_args_is_help=True,
    add_completion=False,
    cls=ContractGroup,
)



@app.callback()
def _group() -> None:
    """Terminal sandboxes (local namespaces, docker): reproduce what a model saw."""


_EXEC_HELP = """Run CMD in exactly the sandbox an agent gets on the workspace DIR.

Prints the command's stdout and stderr and exits with its exit code (124 on timeout).
One CMD word is a shell command line; several words are quoted and joined.

\b
Examples:
  cuda-agent sandbox exec runs/ws42 -- bash utils/compile.sh
  cuda-agent sandbox exec runs/ws42 -- 'python -m utils.verification 2>&1 | tail'
  cuda-agent sandbox exec --backend docker --image cuda-agent-sandbox-test:latest \\
      --host-toolchain runs/ws42 -- g++ --version
"""


@app.command("exec", help=_EXEC_HELP)
def exec_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="The workspace.", exists=True, file_okay=False)],
    cmd: Annotated[list[str], typer.Argument(metavar="CMD...", help="The command (after --).")],
    backend: Annotated[str, typer.Option(help="local | docker (ignored with --config).")] = "local",
    config: Annotated[
        Optional[Path], typer.Option(help="YAML/JSON file of a sandbox config (the run's `sandbox:` section).")
    ] = None,
    image: Annotated[Optional[str], typer.Option(help="Docker image (docker backend).")] = None,
    host_toolchain: Annotated[
        bool, typer.Option(help="docker: mount the host's /usr and this venv read-only (the test image).")
    ] = False,
    timeout: Annotated[Optional[float], typer.Option(help="Wall-clock limit, seconds.")] = None,
    pool: Annotated[
        Optional[str], typer.Option(help="Evaluation pool the workspace's utils/ scripts reach (a socket path, "
                                    "mounted into the sandbox); default $CUDA_AGENT_POOL.")
    ] = None,
) -> None:
    command = cmd[0] if len(cmd) == 1 else shlex.join(cmd)
    sandbox_config = _load_config(config, backend, image, host_toolchain)
    result = asyncio.run(_run(sandbox_config, directory, command, timeout, _pool_access(pool, directory)))
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.truncated:
        typer.echo("[sandbox] output truncated (limits.max_output_bytes)", err=True)
    if result.timed_out:
        typer.echo(f"[sandbox] timed out after {result.duration_s:.1f} s; killed", err=True)
    raise typer.Exit(result.exit_code if result.exit_code >= 0 else 128 - result.exit_code)


def _load_config(path: Path | None, backend: str, image: str | None, host_toolchain: bool):
    from pydantic import TypeAdapter, ValidationError

    from cuda_agent.errors import ConfigError
    from cuda_agent.sandbox_pool.terminal.config import SandboxConfig

    if path is not None:
        text = path.read_text()
        raw = json.loads(text) if path.suffix == ".json" else _yaml(text)
        if not isinstance(raw, dict):
            raise ConfigError(f"{path} holds no sandbox config object; see docs/sandbox.md")
    else:
        raw = {"type": backend}
    if image:
        raw["image"] = image
    if host_toolchain:
        from cuda_agent.sandbox_pool.terminal.hostenv import host_toolchain_mounts

        raw["host_mounts"] = {**host_toolchain_mounts(), **raw.get("host_mounts", {})}
    try:
        return TypeAdapter(SandboxConfig).validate_python(raw)
    except ValidationError as exc:
        from cuda_agent.cli.contract import validation_message

        raise ConfigError(f"invalid sandbox config: {validation_message(exc)}") from exc


def _yaml(text: str) -> object:
    import yaml

    data = yaml.safe_load(text) or {}
    return data.get("sandbox", data) if isinstance(data, dict) else data


def _pool_access(address: str | None, directory: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(read-only mounts, environment) that let commands in the sandbox reach the pool at `address`
    (default $CUDA_AGENT_POOL): the workspace's model.py is registered with the pool, and the pool's
    sandbox socket is mounted at its own path (sandbox_access.py). The sandbox has no network, so a
    ray:// address is not passed in (the scripts then use an embedded evaluator)."""
    import asyncio
    import os

    from cuda_agent.sandbox_pool.pool.config import ENV_ADDRESS
    from cuda_agent.sandbox_pool.pool.sandbox_access import grant_sandbox_access

    address = address or os.environ.get(ENV_ADDRESS) or None
    if not address:
        return {}, {}
    if address.startswith("ray://"):
        typer.echo(f"[sandbox] {ENV_ADDRESS}={address} is not reachable without a network; commands inside use "
                   "an embedded evaluator", err=True)
        return {}, {}
    problem = directory / "model.py"
    # A folder that is not a workspace registers nothing: its commands may still ask for the pool's status.
    problem_src = problem.read_text(encoding="utf-8") if problem.is_file() else None
    return asyncio.run(grant_sandbox_access(address, problem_src))


async def _run(config, directory: Path, command: str, timeout: float | None,
               pool: tuple[dict[str, str], dict[str, str]] = ({}, {})):
    from cuda_agent.sandbox_pool.terminal.config import create_sandbox

    mounts, env = pool
    async with create_sandbox(config, directory, extra_ro_mounts=mounts, env=env) as sandbox:
        return await sandbox.run(command, timeout_s=timeout)

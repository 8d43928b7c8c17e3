"""Making a sandbox and a session from configuration, for hosts that do not bind one themselves.

Used by the veRL adapters (lazy sessions) and by `cuda-agent tool`. `create_sandbox`
imports a backend only when it is used (the Docker SDK only for docker).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from cuda_agent.errors import ConfigError, WorkspaceError
from cuda_agent.sandbox_pool.terminal.base import TerminalSandbox
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.settings import ToolsConfig


class SandboxToolConfig(BaseModel):
    """The `config:` block of every tool entry in a veRL tool YAML (the same for all tools)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["native"] = Field("native", description="veRL's tool type; only 'native' exists.")
    backend: Literal["local", "docker"] = Field("local", description="Terminal sandbox backend.")
    sandbox_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields of the backend's config (LocalSandboxConfig / DockerSandboxConfig), e.g. image, limits.",
    )
    sandbox_factory: str | None = Field(
        None,
        description="'module:function' taking a workspace Path and returning a TerminalSandbox; overrides backend.",
    )
    idle_timeout_s: float = Field(900.0, gt=0, description="Lazily created sessions idle this long are closed.")
    workspace_parent: str | None = Field(
        None, description="Where fresh per-trajectory workspaces are created (default: the system temp dir)."
    )
    tools: ToolsConfig = Field(default_factory=ToolsConfig, description="Limits and protected paths.")

    @classmethod
    def from_verl(cls, config: dict[str, Any]) -> "SandboxToolConfig":
        """Validate veRL's plain-dict config, with the fix in the message on error."""
        try:
            return cls.model_validate(config)
        except ValidationError as exc:
            raise ConfigError(f"invalid cuda_agent tool config {config!r}: {exc}") from exc


class CreateKwargs(BaseModel):
    """Per-trajectory `create_kwargs` (tools_kwargs.<tool or 'sandbox'>.create_kwargs in the dataset row)."""

    model_config = ConfigDict(extra="forbid")

    workspace_dir: str | None = Field(None, description="Use this existing directory in place (one trajectory only).")
    problem_src: str | None = Field(
        None, description="A CUDA task's model.py: create_workspace makes the fresh workspace (then template, files)."
    )
    device: Literal["cpu", "cuda"] = Field("cuda", description="The device of a workspace made from problem_src.")
    template_dir: str | None = Field(None, description="Copy this directory into a fresh per-trajectory workspace.")
    files: dict[str, str] | None = Field(
        None, description="Files to seed into the fresh workspace: path -> content (a dict or its JSON text)."
    )
    trajectory_id: str | None = Field(None, description="Explicit trajectory id (hosts that pass no agent_data).")

    @field_validator("files", mode="before")
    @classmethod
    def _files_from_json(cls, value: object) -> object:
        return json.loads(value) if isinstance(value, str) else value

    @classmethod
    def parse(cls, values: dict[str, Any]) -> "CreateKwargs":
        """Validate, turning a malformed dataset row into a ConfigError."""
        try:
            return cls.model_validate({k: v for k, v in values.items() if v is not None})
        except (ValidationError, json.JSONDecodeError) as exc:
            raise ConfigError(f"invalid tool create_kwargs {values!r}: {exc}") from exc


def make_sandbox(config: SandboxToolConfig, workspace: Path) -> TerminalSandbox:
    """A (not yet started) sandbox around `workspace`, from the configured backend or factory."""
    if config.sandbox_factory:
        module_name, _, attribute = config.sandbox_factory.partition(":")
        return getattr(importlib.import_module(module_name), attribute)(workspace)
    from cuda_agent.sandbox_pool.terminal.config import SandboxConfig, create_sandbox

    try:
        backend_config = TypeAdapter(SandboxConfig).validate_python({**config.sandbox_options, "type": config.backend})
    except ValidationError as exc:
        raise ConfigError(f"invalid sandbox_options for the {config.backend} backend: {exc}") from exc
    return create_sandbox(backend_config, workspace, protected=list(config.tools.protected_paths))


def _fresh_workspace(parent: str | None, kwargs: CreateKwargs) -> Path:
    root = Path(tempfile.mkdtemp(prefix="cuda-agent-ws-", dir=parent))
    if kwargs.problem_src is not None:
        from cuda_agent.sandbox_pool.workspace import create_workspace

        create_workspace(kwargs.problem_src, root, kwargs.device)
    if kwargs.template_dir:
        template = Path(kwargs.template_dir)
        if not template.is_dir():
            shutil.rmtree(root)
            raise WorkspaceError(f"template_dir {template} is not a directory")
        shutil.copytree(template, root, dirs_exist_ok=True, symlinks=True)
    for relative, content in (kwargs.files or {}).items():
        target = (root / relative).resolve()
        if not target.is_relative_to(root.resolve()):
            shutil.rmtree(root)
            raise WorkspaceError(f"seed file {relative!r} lies outside the workspace")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    return root


async def open_session(config: SandboxToolConfig, kwargs: CreateKwargs) -> ToolSession:
    """A started sandbox in a session that closes it (and deletes a fresh workspace) on close."""
    if kwargs.workspace_dir:
        workspace, fresh = Path(kwargs.workspace_dir), False
        if not workspace.is_dir():
            raise WorkspaceError(f"workspace_dir {workspace} is not a directory")
    else:
        workspace, fresh = await asyncio.to_thread(_fresh_workspace, config.workspace_parent, kwargs), True
    sandbox = make_sandbox(config, workspace)
    await sandbox.start()

    async def on_close() -> None:
        await sandbox.close()
        if fresh:
            await asyncio.to_thread(shutil.rmtree, workspace, True)

    return ToolSession(sandbox, config.tools, on_close=on_close)

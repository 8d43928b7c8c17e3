"""veRL `BaseTool` adapters: the tools inside veRL's agent loops (`tool_config_path`).

How a call finds its sandbox (veRL 0.9.1, `ToolAgentLoop._call_tool`): for every call
veRL runs `create(create_kwargs=tools_kwargs[<tool name>]["create_kwargs"])`, then
`execute(instance_id, args, agent_data=agent_data)`, then `release(instance_id)`; the
instance lives for one call only. `agent_data` is the trajectory's `AgentData`, so:

1. a session bound by the owner under `agent_data.request_id` (`sessions.bind`) is used;
2. else a session bound under `create_kwargs["trajectory_id"]`, if given;
3. else a session is created on first use (`provision.open_session`) from the merged
   create kwargs -- `tools_kwargs["sandbox"]["create_kwargs"]` (shared by all tools)
   overridden by the tool's own -- and keyed by the `AgentData` object itself (two
   trajectories never share one, even with equal request ids). The registry closes it
   when that `AgentData` is garbage-collected (end of the trajectory) or after
   `idle_timeout_s` without calls, whichever comes first.

Schemas: `tool_schema: null` in the YAML makes each tool use our complete schema; its
`model_dump()` returns the raw dict, so even veRL's stock loop renders `items`.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any, ClassVar
from uuid import uuid4

from pydantic import PrivateAttr
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from cuda_agent.errors import ConfigError
from cuda_agent.tools.dispatch import call_tool
from cuda_agent.tools.provision import CreateKwargs, SandboxToolConfig, open_session
from cuda_agent.tools.schemas import tool_schemas
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.sessions import SessionRegistry, default_registry

SHARED_KWARGS_KEY = "sandbox"

#: AgentData object -> the id of its lazily created session (weak: dies with the trajectory).
_LAZY_IDS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


class RawFunctionToolSchema(OpenAIFunctionToolSchema):
    """veRL's schema model that dumps our complete schema (veRL's own drops `items`)."""

    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_raw(cls, raw: dict[str, Any]) -> "RawFunctionToolSchema":
        schema = cls.model_validate(raw)
        schema._raw = copy.deepcopy(raw)
        return schema

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:  # noqa: D102 - see class docstring
        return copy.deepcopy(self._raw)


def _lazy_id(registry: SessionRegistry, agent_data: Any) -> str:
    try:
        trajectory_id = _LAZY_IDS.get(agent_data)
    except TypeError:  # not weak-referenceable (not veRL's AgentData): the request id is all there is
        return str(agent_data.request_id)
    if trajectory_id is None:
        trajectory_id = f"{agent_data.request_id}/{uuid4().hex[:8]}"
        _LAZY_IDS[agent_data] = trajectory_id
        registry.release_when_collected(agent_data, trajectory_id)
    return trajectory_id


class SandboxTool(BaseTool):
    """One of our tools as a veRL BaseTool; subclasses only set `tool_name`."""

    tool_name: ClassVar[str] = ""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None) -> None:
        if not self.tool_name:
            raise ConfigError(f"{type(self).__name__} has no tool_name; use one of the per-tool classes")
        self.settings = SandboxToolConfig.from_verl(config)
        self.registry = default_registry()
        self._create_kwargs: dict[str, dict[str, Any]] = {}
        super().__init__(config, tool_schema)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return RawFunctionToolSchema.from_raw(tool_schemas([self.tool_name])[0])

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        self._create_kwargs[instance_id] = dict(kwargs.get("create_kwargs") or {})
        return instance_id, ToolResponse()

    @rollout_trace_op
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        session = await self._session(self._create_kwargs.get(instance_id, {}), kwargs.get("agent_data"))
        observation = await call_tool(session, self.tool_name, parameters)
        metrics = {**observation.metrics, "is_error": float(observation.is_error)}
        return ToolResponse(text=observation.text), 0.0, metrics

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._create_kwargs.pop(instance_id, None)

    async def _session(self, own_kwargs: dict[str, Any], agent_data: Any) -> ToolSession:
        shared = {}
        if agent_data is not None:
            bound = self.registry.get(agent_data.request_id)
            if bound is not None:
                return bound
            shared = (agent_data.tools_kwargs or {}).get(SHARED_KWARGS_KEY, {}).get("create_kwargs", {})
        create = CreateKwargs.parse({**shared, **own_kwargs})
        if create.trajectory_id is not None:
            key = create.trajectory_id
        elif agent_data is not None:
            key = _lazy_id(self.registry, agent_data)
        else:
            raise ConfigError(
                f"{self.tool_name}: no agent_data and no create_kwargs.trajectory_id: cannot tell which "
                "trajectory this call belongs to"
            )
        return await self.registry.get_or_create(
            key, lambda: open_session(self.settings, create), idle_timeout_s=self.settings.idle_timeout_s
        )


class BashTool(SandboxTool):
    tool_name = "Bash"


class BashOutputTool(SandboxTool):
    tool_name = "BashOutput"


class KillBashTool(SandboxTool):
    tool_name = "KillBash"


class ReadTool(SandboxTool):
    tool_name = "Read"


class WriteTool(SandboxTool):
    tool_name = "Write"


class EditTool(SandboxTool):
    tool_name = "Edit"


class MultiEditTool(SandboxTool):
    tool_name = "MultiEdit"


class GlobTool(SandboxTool):
    tool_name = "Glob"


class GrepTool(SandboxTool):
    tool_name = "Grep"


class TodoWriteTool(SandboxTool):
    tool_name = "TodoWrite"

"""The table of tools: name -> argument model and handler. Filled by decorator at import."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from cuda_agent.errors import ConfigError
from cuda_agent.tools.observation import ToolObservation
from cuda_agent.tools.session import ToolSession

Handler = Callable[[ToolSession, Any], Awaitable[ToolObservation]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, its argument model and the coroutine that runs it."""

    name: str
    args_model: type[BaseModel]
    handler: Handler


_TOOLS: dict[str, ToolSpec] = {}


def tool(name: str, args_model: type[BaseModel]) -> Callable[[Handler], Handler]:
    """Register `handler` as tool `name`; a second registration of a name is refused."""

    def decorate(handler: Handler) -> Handler:
        if name in _TOOLS:
            raise ConfigError(f"tool {name!r} is already registered by {_TOOLS[name].handler.__module__}")
        _TOOLS[name] = ToolSpec(name=name, args_model=args_model, handler=handler)
        return handler

    return decorate


def get_tool(name: str) -> ToolSpec | None:
    """The registered tool called `name`, or None."""
    return _TOOLS.get(name)


def tool_names() -> list[str]:
    """Registered tool names, in registration order."""
    return list(_TOOLS)

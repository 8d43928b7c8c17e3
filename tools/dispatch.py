"""`call_tool`: one model tool call in, one observation out; the model's mistakes never raise."""

from __future__ import annotations

import difflib
import json
import time
from typing import Any

from pydantic import BaseModel, ValidationError

from cuda_agent.tools import bash, files, edit, search, todo  # noqa: F401, I001 - registers the tools in this order
from cuda_agent.tools.observation import ToolErrorKind, ToolObservation, ToolUsageError
from cuda_agent.tools.registry import get_tool, tool_names
from cuda_agent.tools.session import ToolSession


def _failure(name: str, kind: ToolErrorKind, message: str) -> ToolObservation:
    return ToolObservation(name=name, text=f"Error: {message}", is_error=True, error=kind)


def _unknown_tool(name: str) -> ToolObservation:
    names = tool_names()
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5) or [
        n for n in names if n.lower() == str(name).lower()
    ]
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return _failure(
        name, ToolErrorKind.UNKNOWN_TOOL, f"there is no tool named '{name}'.{hint} Available tools: {', '.join(names)}."
    )


def _parse(name: str, arguments: str | dict[str, Any] | None) -> dict[str, Any] | ToolObservation:
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments)
    except (json.JSONDecodeError, TypeError) as exc:
        return _failure(
            name,
            ToolErrorKind.INVALID_JSON,
            f"the arguments of {name} are not valid JSON ({exc}). Pass one JSON object, e.g. "
            '{"file_path": "model_new.py"}; escape newlines as \\n and quotes as \\" inside strings.',
        )
    if not isinstance(parsed, dict):
        return _failure(
            name,
            ToolErrorKind.INVALID_JSON,
            f"the arguments of {name} must be a JSON object with named fields, not {type(parsed).__name__}.",
        )
    return parsed


def signature(model: type[BaseModel]) -> str:
    """`file_path: string, offset?: integer, ...` for error messages."""
    schema = model.model_json_schema(by_alias=True)
    required = set(schema.get("required", []))
    parts = []
    for key, prop in schema.get("properties", {}).items():
        options = [p.get("type", "?") for p in prop.get("anyOf", []) if p.get("type") != "null"]
        kind = prop.get("type") or "/".join(options)
        parts.append(f"{key}{'' if key in required else '?'}: {kind or 'object'}")
    return ", ".join(parts)


def _argument_error(name: str, model: type[BaseModel], exc: ValidationError) -> ToolObservation:
    fields = list(model.model_json_schema(by_alias=True).get("properties", {}))
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "missing":
            problems.append(f"missing required argument '{where}'")
        elif error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(error["loc"][-1]), fields, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close and len(error["loc"]) == 1 else ""
            problems.append(f"unknown argument '{where}'{hint}")
        else:
            problems.append(f"'{where}': {error['msg']}")
    return _failure(
        name,
        ToolErrorKind.INVALID_ARGUMENTS,
        f"invalid arguments for {name}: {'; '.join(problems)}. {name} takes ({signature(model)}).",
    )


async def call_tool(session: ToolSession, name: str, arguments: str | dict[str, Any] | None) -> ToolObservation:
    """Run one tool call on the session's sandbox and return what the model should see.

    Never raises for the model's mistakes (unknown tool, malformed JSON, bad arguments,
    bad paths, failed edits, ...): each is an observation with `is_error` and a hint. It
    raises only for infrastructure failures (e.g. a `SandboxError` from a dead sandbox),
    which are not the model's fault.
    """
    started = time.monotonic()
    session.calls += 1
    session.in_flight += 1
    try:
        observation = await _run(session, name, arguments)
    finally:
        session.in_flight -= 1
        session.touch()
    if observation.error is not None:
        session.errors[observation.error.value] += 1
    observation.metrics["duration_s"] = time.monotonic() - started
    return observation


async def _run(session: ToolSession, name: str, arguments: str | dict[str, Any] | None) -> ToolObservation:
    spec = get_tool(name)
    if spec is None:
        return _unknown_tool(name)
    parsed = _parse(name, arguments)
    if isinstance(parsed, ToolObservation):
        return parsed
    try:
        args = spec.args_model.model_validate(parsed)
    except ValidationError as exc:
        return _argument_error(name, spec.args_model, exc)
    try:
        return await spec.handler(session, args)
    except ToolUsageError as exc:
        return _failure(name, exc.kind, str(exc))

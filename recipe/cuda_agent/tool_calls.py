"""Tool calls out of generated tokens, with veRL's own parsers, and their defects as observations.

veRL's parsers drop a malformed call silently (hermes logs the JSON error and skips it), which
would end the trajectory as if the model had finished. Here every call block the parser could
not read becomes a ``ParsedCall`` with an ``error``, so the model sees what went wrong and the
loop goes on (the model's mistake is an observation).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # veRL loads with the token-level parser path only: the standalone runner runs without veRL
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.tools.schemas import OpenAIFunctionToolSchema


class ParsedCall(BaseModel):
    """One tool call of an assistant turn: runnable (``arguments``) or refused (``error``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Tool name as generated ('' if unreadable).")
    arguments: dict[str, Any] | None = Field(None, description="Decoded arguments; None when refused.")
    error: str | None = Field(None, description="Why the call cannot run; shown to the model.")
    call_id: str | None = Field(None, description="Model-emitted call id, if any.")


def parser_schemas(raw_schemas: list[dict[str, Any]]) -> list[OpenAIFunctionToolSchema]:
    """veRL's (lossy) schema objects, which some parsers use to convert argument types."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    converted = []
    for schema in raw_schemas:
        function = schema["function"]
        parameters = function.get("parameters") or {}
        properties = {
            name: {"type": spec.get("type", "string"), "description": spec.get("description")}
            for name, spec in (parameters.get("properties") or {}).items()
        }
        converted.append(
            OpenAIFunctionToolSchema.model_validate(
                {
                    "type": "function",
                    "function": {
                        "name": function["name"],
                        "description": function.get("description", ""),
                        "parameters": {
                            "type": "object",
                            "properties": properties,
                            "required": parameters.get("required", []),
                        },
                    },
                }
            )
        )
    return converted


def _coerce_structured(arguments: dict[str, Any], raw_schema: dict[str, Any] | None) -> dict[str, Any]:
    """Decode JSON text given for array/object parameters (XML-style formats carry everything as text)."""
    if raw_schema is None:
        return arguments
    properties = (raw_schema["function"].get("parameters") or {}).get("properties") or {}
    coerced = dict(arguments)
    for name, value in arguments.items():
        expected = (properties.get(name) or {}).get("type")
        if expected in ("array", "object") and isinstance(value, str):
            try:
                coerced[name] = json.loads(value)
            except json.JSONDecodeError:
                pass  # left as text: the tool reports the type error to the model
    return coerced


def validate_call(
    name: str, arguments_json: str | None, call_id: str | None, raw_schemas: dict[str, dict[str, Any]]
) -> ParsedCall:
    """A call as generated (tool name, arguments as JSON text) checked against our raw schemas by name.

    Shared by the token-level parser path and chat-completions tool calls (the runner), so a
    model's defective call reads the same to it in training and in evaluation.
    """
    if name not in raw_schemas:
        known = ", ".join(sorted(raw_schemas))
        return ParsedCall(name=name, call_id=call_id, error=f"Unknown tool '{name}'. Available tools: {known}.")
    try:
        arguments = json.loads(arguments_json)  # type: ignore[arg-type]
    except (json.JSONDecodeError, TypeError) as exc:
        return ParsedCall(name=name, call_id=call_id, error=f"Arguments of '{name}' are not valid JSON: {exc}.")
    if not isinstance(arguments, dict):
        return ParsedCall(name=name, call_id=call_id, error=f"Arguments of '{name}' must be a JSON object.")
    return ParsedCall(name=name, call_id=call_id, arguments=_coerce_structured(arguments, raw_schemas[name]))


def _start_marker(parser: ToolParser) -> str | None:
    return getattr(parser, "tool_call_start_token", None)


class ToolCallExtractor:
    """Parses assistant turns with one veRL tool parser against our raw schemas."""

    def __init__(self, parser: ToolParser, raw_schemas: list[dict[str, Any]]):
        self.parser = parser
        self.raw_schemas = {schema["function"]["name"]: schema for schema in raw_schemas}
        self._parser_schemas = parser_schemas(raw_schemas)

    async def extract(self, token_ids: list[int]) -> tuple[str, list[ParsedCall]]:
        """(assistant text without the calls, the calls in order, refused ones included)."""
        content, function_calls = await self.parser.extract_tool_calls(token_ids, self._parser_schemas)
        calls = [self._validate(call.name, call.arguments, call.tool_call_id) for call in function_calls]
        calls.extend(self._unparsed(token_ids, len(function_calls)))
        return content, calls

    def _validate(self, name: str, arguments_json: str, call_id: str | None) -> ParsedCall:
        return validate_call(name, arguments_json, call_id, self.raw_schemas)

    def _unparsed(self, token_ids: list[int], parsed: int) -> list[ParsedCall]:
        marker = _start_marker(self.parser)
        if marker is None:
            return []
        text = self.parser.tokenizer.decode(token_ids)
        missing = text.count(marker) - parsed
        error = (
            f"Malformed tool call: a {marker} block could not be parsed (check the JSON / the closing tag); "
            "it was not run."
        )
        return [ParsedCall(name="", error=error) for _ in range(max(0, missing))]

"""Trajectory records: one finished trajectory as training data (docs/training.md, "Trajectory records").

The one model of a trajectory that both the veRL agent loop and the standalone runner write, and
that RFT (``cuda-agent rft filter``) and value pre-training read. A record is OpenAI-style
``messages`` (assistant turns may carry ``tool_calls``; tool results are role ``tool``), the raw
JSON ``tools`` the model saw, the outcome (reward, evaluator status, infrastructure failure) and the
pattern ``flags`` that RFT filters on.

Parquet encoding (``to_row``), chosen for veRL 0.9.1's ``MultiTurnSFTDataset``
(``data.messages_key=messages``, ``data.tools_key=tools``), which hands each row's nested values
to ``tokenizer.apply_chat_template`` as they come out of ``pandas.read_parquet``, unparsed:

- tool-call ``arguments`` are JSON text, as the OpenAI format (and veRL's own multi-turn SFT
  tests) have them: parquet merges heterogeneous dicts into one struct type, so a Bash call's
  arguments stored as a dict would gain a Write call's ``content: null``. Chat templates that
  print a string argument as is (Qwen3's, ``arguments is string``) render the exact JSON the model
  generated; templates that always ``tojson`` (Qwen2.5's) would quote it again (docs/training.md).
- ``tools`` is a list of dicts, because transformers' ``apply_chat_template`` refuses JSON text
  there. Parquet gives every tool of a row the union of the tools' keys (absent ones null);
  ``from_row`` drops those nulls again, and the tool block of the SFT prompt (loss-masked) shows
  them (docs/training.md).
- every message has the keys ``MESSAGE_KEYS`` (absent ones null; templates test truthiness).

``RecordWriter`` writes each record as its own small parquet shard, atomically (temporary file,
fsync, rename): many processes may write into one folder, and a record is durable once ``write``
returns. ``read_records`` reads files or folders of shards (and RFT's merged files).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cuda_agent.errors import ConfigError

ROLES = ("system", "user", "assistant", "tool")
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
"""The keys every stored message has (null where absent); others are refused."""

FILE_CHANGING_TOOLS = frozenset({"Write", "Edit", "MultiEdit"})
"""Tools whose successful call changes a workspace file (used when file changes are not measured)."""

_BASH_WRITES = re.compile(r"(?<![<>0-9&])>{1,2}(?!&)|\btee\b|\bsed\s+-i|\b(?:cp|mv|rm|touch|mkdir|patch)\b")
"""Bash commands that may change files, for the estimate of idle turns."""


class TrajectoryFlags(BaseModel):
    """Pattern counts of a trajectory that RFT filters on; 0 = clean."""

    model_config = ConfigDict(extra="forbid")

    malformed_calls: int = Field(0, ge=0, description="Unparsable calls or arguments that are not a JSON object.")
    unknown_tool_calls: int = Field(0, ge=0, description="Calls of a tool name not in `tools`.")
    schema_errors: int = Field(0, ge=0, description="Calls whose arguments fail the tool's JSON schema.")
    max_repeated_calls: int = Field(
        0, ge=0, description="Longest run of identical consecutive calls (name + arguments); 1 = no repeat."
    )
    max_idle_turns: int = Field(0, ge=0, description="Longest run of assistant turns with no workspace file change.")


class TrajectoryRecord(BaseModel):
    """One finished trajectory, as written by the agent loop and the runner."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(
        description="OpenAI chat messages; assistant `tool_calls` carry arguments as JSON text; "
        "tool results are role 'tool' with `tool_call_id`."
    )
    tools: list[dict[str, Any]] = Field(description="The raw JSON tool schemas the model saw.")
    reward: float | None = Field(description="The trajectory's reward (None: not scored).")
    status: str | None = Field(description="The evaluator's status (an EvalStatus value), or None.")
    infra_failure: bool = Field(description="The environment failed (never the model's fault): not training data.")
    task_id: str = Field(description="The task's id.")
    data_source: str | None = Field(None, description="The dataset row's data_source.")
    sample: int = Field(0, ge=0, description="Sample index of this task (runner --samples).")
    turns: int = Field(ge=0, description="Assistant turns.")
    prompt_tokens: int | None = Field(None, ge=0, description="Tokens of the initial prompt (None: not counted).")
    response_tokens: int | None = Field(None, ge=0, description="Response tokens, observations included.")
    stop_reason: str | None = Field(None, description="Why it ended (a cuda_agent.recipe.metrics.StopReason value).")
    flags: TrajectoryFlags = Field(description="Pattern counts (see TrajectoryFlags).")
    model: str | None = Field(None, description="The policy's name or path.")
    created: str = Field(description="When the trajectory finished, ISO-8601 UTC.")
    demonstration: str | None = Field(
        None, description="The source of a demonstration (a known solution written through the real tools by a "
        "scripted agent, cuda_agent.evaluation.demonstration: 'solutions:<folder>'); None for a policy's rollout.")

    @field_validator("messages")
    @classmethod
    def _check_messages(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not messages:
            raise ValueError("a trajectory has at least one message")
        return [_normalize_message(index, message) for index, message in enumerate(messages)]

    def to_row(self) -> dict[str, Any]:
        """A parquet row (see ``row_schema``) that loads unchanged in veRL's MultiTurnSFTDataset."""
        row = self.model_dump(exclude={"messages", "tools"})
        row["messages"] = [{key: message.get(key) for key in MESSAGE_KEYS} for message in self.messages]
        row["tools"] = [dict(tool) for tool in self.tools]
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TrajectoryRecord:
        """Inverse of ``to_row`` (also accepts what pandas reads back: numpy arrays, null keys)."""
        row = {key: _plain(value) for key, value in row.items()}
        row["tools"] = [_drop_nulls(tool) for tool in row.get("tools") or []]
        row["messages"] = [
            {key: value for key, value in message.items() if value is not None} for message in row.get("messages") or []
        ]
        return cls.model_validate(row)

    @property
    def ends_with_assistant(self) -> bool:
        """Whether the last message is the model's (the reward sits on its last token)."""
        return self.messages[-1]["role"] == "assistant"


def build_record(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    *,
    info: Any,
    metrics: Any,
    task_id: str,
    data_source: str | None = None,
    sample: int = 0,
    prompt_tokens: int | None = None,
    model: str | None = None,
    changed_files_per_turn: list[bool] | None = None,
) -> TrajectoryRecord:
    """The record of a finished trajectory from what the turn loop holds.

    ``info`` is the trajectory's ``cuda_agent.reward_fns.info.RewardInfo`` and ``metrics`` its
    ``cuda_agent.recipe.metrics.TrajectoryMetrics``. Calls the loop refused before running them
    (unparsable, bad JSON, unknown tool: not in the assistant message's ``tool_calls``) are counted
    from ``metrics.malformed_calls`` on top of what the messages show.
    """
    flags = flags_from_messages(messages, tools, changed_files_per_turn=changed_files_per_turn)
    flags.malformed_calls += int(getattr(metrics, "malformed_calls", 0) or 0)
    infra = bool(info.infra_failure)
    return TrajectoryRecord(
        messages=[dict(message) for message in messages],
        tools=[dict(tool) for tool in tools],
        reward=None if infra else float(info.score),
        status=info.status,
        infra_failure=infra,
        task_id=task_id or "",
        data_source=data_source,
        sample=sample,
        turns=int(metrics.turns),
        prompt_tokens=prompt_tokens,
        response_tokens=int(metrics.response_tokens) if metrics.response_tokens is not None else None,
        stop_reason=metrics.stop_reason or None,
        flags=flags,
        model=model,
        created=now_utc(),
    )


def now_utc() -> str:
    """The current time, ISO-8601 UTC (the ``created`` field)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _normalize_message(index: int, message: dict[str, Any]) -> dict[str, Any]:
    unknown = set(message) - set(MESSAGE_KEYS)
    if unknown:
        raise ValueError(f"message {index} has keys {sorted(unknown)}; allowed: {list(MESSAGE_KEYS)}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"message {index} has role {role!r}; expected one of {list(ROLES)}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"message {index}: content must be text")
    normalized = {key: value for key, value in message.items() if value is not None}
    normalized["content"] = content or ""
    calls = message.get("tool_calls")
    if calls:
        if role != "assistant":
            raise ValueError(f"message {index}: only assistant messages carry tool_calls")
        normalized["tool_calls"] = [_normalize_call(index, call) for call in calls]
    else:
        normalized.pop("tool_calls", None)
    return normalized


def _normalize_call(index: int, call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict):
        raise ValueError(f"message {index}: a tool call without a 'function' object")
    arguments = function.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        arguments = json.dumps(arguments)  # dicts become the JSON text the OpenAI format stores
    normalized = {"type": call.get("type") or "function", "function": {"name": function.get("name") or "", "arguments": arguments or ""}}
    if call.get("id"):
        normalized["id"] = call["id"]
    return normalized


def _plain(value: Any) -> Any:
    """numpy arrays / pandas values (what pyarrow -> pandas gives) as plain Python."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value != value:  # NaN from pandas for a null float
        return None
    return value


def _drop_nulls(value: Any) -> Any:
    """Remove the null keys parquet's struct merge added (recursively)."""
    if isinstance(value, dict):
        return {key: _drop_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_drop_nulls(item) for item in value]
    return value


# --- flags ---------------------------------------------------------------------------------


def flags_from_messages(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    *,
    changed_files_per_turn: list[bool] | None = None,
) -> TrajectoryFlags:
    """Pattern counts of a trajectory from its messages.

    ``changed_files_per_turn`` (one bool per assistant turn: did the workspace change after it) is
    used when measured; otherwise a turn counts as changing files when it calls Write / Edit /
    MultiEdit or a Bash command that may write (redirection, tee, sed -i, cp, mv, rm, touch,
    mkdir, patch) — an estimate.
    """
    schemas = {schema["function"]["name"]: schema["function"].get("parameters") or {} for schema in tools}
    flags = TrajectoryFlags()
    signatures: list[str] = []
    turn_changes: list[bool] = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        changed = False
        for call in message.get("tool_calls") or []:
            name, arguments, problem = _decode_call(call, schemas)
            if problem == "malformed":
                flags.malformed_calls += 1
            elif problem == "unknown":
                flags.unknown_tool_calls += 1
            elif problem == "schema":
                flags.schema_errors += 1
            signatures.append(name + "\0" + (json.dumps(arguments, sort_keys=True) if arguments is not None else ""))
            changed = changed or _may_change_files(name, arguments)
        turn_changes.append(changed)
    if changed_files_per_turn is not None:
        turn_changes = list(changed_files_per_turn)
    flags.max_repeated_calls = _longest_run(signatures)
    flags.max_idle_turns = _longest_false_run(turn_changes)
    return flags


def _decode_call(call: dict[str, Any], schemas: dict[str, dict[str, Any]]) -> tuple[str, Any, str | None]:
    """(name, decoded arguments or None, problem: None | "malformed" | "unknown" | "schema")."""
    function = call.get("function") or {}
    name = function.get("name") or ""
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return name, None, "malformed"
    if not name or not isinstance(arguments, dict):
        return name, None, "malformed"
    if name not in schemas:
        return name, arguments, "unknown"
    if schema_error(arguments, schemas[name]) is not None:
        return name, arguments, "schema"
    return name, arguments, None


def schema_error(arguments: dict[str, Any], parameters: dict[str, Any]) -> str | None:
    """Why ``arguments`` fail the JSON schema ``parameters`` (None if they pass)."""
    import jsonschema

    try:
        jsonschema.validate(arguments, parameters)
    except jsonschema.ValidationError as exc:
        return exc.message
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"a tool's JSON schema is invalid: {exc.message}") from exc
    return None


def _may_change_files(name: str, arguments: Any) -> bool:
    if name in FILE_CHANGING_TOOLS:
        return True
    if name == "Bash" and isinstance(arguments, dict):
        return bool(_BASH_WRITES.search(str(arguments.get("command", ""))))
    return False


def _longest_run(items: list[str]) -> int:
    longest = run = 0
    for index, item in enumerate(items):
        run = run + 1 if index and item == items[index - 1] else 1
        longest = max(longest, run)
    return longest


def _longest_false_run(changes: list[bool]) -> int:
    longest = run = 0
    for changed in changes:
        run = 0 if changed else run + 1
        longest = max(longest, run)
    return longest


# --- parquet -------------------------------------------------------------------------------


def row_schema(tools_type):
    """The pyarrow schema of record rows: fixed, except ``tools`` (the struct parquet infers)."""
    import pyarrow as pa

    call = pa.struct(
        [
            ("id", pa.string()),
            ("type", pa.string()),
            ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
        ]
    )
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.list_(call)),
            ("tool_call_id", pa.string()),
            ("name", pa.string()),
        ]
    )
    flags = pa.struct([(name, pa.int64()) for name in TrajectoryFlags.model_fields])
    return pa.schema(
        [
            ("messages", pa.list_(message)),
            ("tools", tools_type),
            ("reward", pa.float64()),
            ("status", pa.string()),
            ("infra_failure", pa.bool_()),
            ("task_id", pa.string()),
            ("data_source", pa.string()),
            ("sample", pa.int64()),
            ("turns", pa.int64()),
            ("prompt_tokens", pa.int64()),
            ("response_tokens", pa.int64()),
            ("stop_reason", pa.string()),
            ("flags", flags),
            ("model", pa.string()),
            ("created", pa.string()),
            ("demonstration", pa.string()),
        ]
    )


def write_parquet(records: Iterable[TrajectoryRecord], path: Path | str) -> int:
    """Write records to one parquet file, atomically; returns how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [record.to_row() for record in records]
    tools_type = pa.array([row["tools"] for row in rows]).type
    if not rows or pa.types.is_null(tools_type.value_type):  # no tools at all
        tools_type = pa.list_(pa.struct([("type", pa.string())]))
    table = pa.Table.from_pylist(rows, schema=row_schema(tools_type))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            pq.write_table(table, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return len(rows)


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class RecordWriter:
    """Appends records to a folder of parquet shards, one shard per record.

    Safe across processes and threads (unique names, atomic renames); a record is on disk once
    ``write`` returns. Usable as a context manager.
    """

    def __init__(self, folder: Path | str, *, shard_prefix: str | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.shard_prefix = shard_prefix or "trajectory"
        self.written = 0
        self._closed = False

    def write(self, record: TrajectoryRecord) -> None:
        """Write one record as its own shard (durable when this returns)."""
        if self._closed:
            raise ConfigError(f"RecordWriter for {self.folder} is closed")
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        write_parquet([record], self.folder / f"{self.shard_prefix}-{stamp}-{uuid.uuid4().hex[:12]}.parquet")
        self.written += 1

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def record_files(paths: Iterable[Path | str]) -> list[Path]:
    """The parquet files named (folders: their ``*.parquet`` files, recursively, hidden ones skipped)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.parquet") if not p.name.startswith("."))
            if not found:
                raise ConfigError(f"{path}: no .parquet trajectory files in this folder")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"{path}: no such trajectory file or folder")
    return files


def read_records(paths: Iterable[Path | str]) -> Iterator[TrajectoryRecord]:
    """Records from parquet files or folders of shards.

    Raises ConfigError (one line, naming the file) for a missing path, an empty folder, an empty
    or malformed file, or a row that is not a valid record.
    """
    import pyarrow.parquet as pq

    for path in record_files(paths):
        try:
            if path.stat().st_size == 0:
                raise ConfigError(f"{path}: empty file, not a trajectory parquet file")
            table = pq.read_table(path)
        except ConfigError:
            raise
        except Exception as exc:  # pyarrow raises several types for a broken file
            raise ConfigError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from exc
        if table.num_rows == 0:
            raise ConfigError(f"{path}: the file has no trajectories")
        for index, row in enumerate(table.to_pylist()):
            try:
                yield TrajectoryRecord.from_row(row)
            except (ValidationError, ValueError) as exc:
                first = str(exc).splitlines()
                reason = " ".join(line.strip() for line in first[:3])
                raise ConfigError(f"{path}: row {index} is not a trajectory record: {reason}") from exc

"""What a tool call returns, and the typed failure that becomes an error observation."""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import ToolCallError


class ToolErrorKind(str, enum.Enum):
    """Why a call was not carried out as asked; set where it happens, never parsed from text."""

    UNKNOWN_TOOL = "unknown_tool"
    INVALID_JSON = "invalid_json"
    INVALID_ARGUMENTS = "invalid_arguments"
    BAD_PATH = "bad_path"
    PROTECTED_PATH = "protected_path"
    NOT_FOUND = "not_found"
    IS_DIRECTORY = "is_directory"
    BINARY_FILE = "binary_file"
    TOO_LARGE = "too_large"
    NO_MATCH = "no_match"
    AMBIGUOUS_MATCH = "ambiguous_match"
    NO_CHANGE = "no_change"
    INVALID_PATTERN = "invalid_pattern"
    UNKNOWN_JOB = "unknown_job"
    TOO_MANY_JOBS = "too_many_jobs"
    TIMEOUT = "timeout"


class ToolObservation(BaseModel):
    """The result of one tool call, as the model will read it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The tool name as the model called it (may be unknown).")
    text: str = Field(description="What the model sees.")
    is_error: bool = Field(False, description="True when the call was not carried out as asked.")
    error: ToolErrorKind | None = Field(None, description="Why, when is_error is True.")
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="Numbers for logging: duration_s always; exit_code, timed_out, truncated where they apply.",
    )


class ToolUsageError(ToolCallError):
    """A model's call that cannot run; `call_tool` turns it into an error observation.

    Raised only inside the tool implementations; it never leaves `call_tool`.
    """

    def __init__(self, kind: ToolErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind

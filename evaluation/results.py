"""The results JSONL of a run: one ``RunResult`` line per (task, sample) (docs/evaluation.md).

Lines are appended and flushed as each (task, sample) finishes, so nothing finished is lost when
a run is interrupted; a re-run reads the file and skips the pairs already finished. Endpoint and
infrastructure failures are recorded but are not finished: a re-run tries them again, and reports
leave them out of every metric (they are never scored -1).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.harness.models import EvalStatus, Speed

ENDPOINT_ERROR = "endpoint_error"
"""Status of a sample the model endpoint failed on (after retries)."""
INFRA_ERROR = "infra_error"
"""Status of a sample the sandbox or the evaluator failed on (EvalStatus.INFRA_ERROR's value)."""
EXCLUDED_STATUSES = frozenset({ENDPOINT_ERROR, INFRA_ERROR})
"""Statuses that are nobody's outcome: retried on resume, left out of metrics."""
PASS_STATUS = EvalStatus.OK.value
"""The one status of a pass: compiled, correct and clean."""
FAILURE_STATUSES = frozenset(status.value for status in EvalStatus if status.is_candidate_failure)
"""The evaluator's verdicts that are the candidate's failure."""
NULL_MEANS_DEFAULT = ("error", "created", "turns", "wall_s")
"""Fields where a JSON null (other writers' "none") means the default: no metric reads them."""


class RunResult(Speed):
    """One (task, sample) of a run (the times and speed-ups: ``Speed``)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(description="Task id (KernelBench: 'level1/1_Square_matrix_multiplication_').")
    level: int | None = Field(None, description="Difficulty level (KernelBench level), None if unknown.")
    data_source: str | None = Field(None, description="Where the task came from (dataset data_source, 'kernelbench', ...).")
    sample: int = Field(0, ge=0, description="Sample index of the task (0 .. --samples - 1).")
    mode: str = Field("agentic", description="agentic, single-turn or solutions.")
    model: str | None = Field(None, description="Model name sent to the endpoint (None when re-scoring solutions).")
    status: str = Field(description="The evaluator's status (EvalStatus value), or endpoint_error / infra_error.")
    correct: bool = Field(False, description="Compiled, correct and clean (a pass).")
    reward: float | None = Field(None, description="The training reward (-1/1/2/3); None for excluded samples.")
    turns: int = Field(0, ge=0, description="Assistant turns.")
    tokens: int | None = Field(None, description="Prompt + completion tokens of the last request (the context used).")
    completion_tokens: int | None = Field(None, description="Completion tokens over all requests.")
    stop_reason: str | None = Field(None, description="Why the trajectory ended (StopReason value).")
    wall_s: float = Field(0.0, ge=0, description="Wall time of the sample, evaluation included.")
    error: str = Field("", description="Failure reason ('' if none).")
    evaluation: dict[str, Any] | None = Field(
        None, description="The evaluator's verdicts, timing receipt and warnings (stages, receipt, timings, "
        "violations, warnings, wall_s) for drill-down."
    )
    created: str = Field("", description="When the sample finished, ISO-8601 UTC.")

    @model_validator(mode="before")
    @classmethod
    def _derive_from_status(cls, data: Any) -> Any:
        """A line without ``correct`` gets it from its status (a pass is status ``ok``; every other known status
        is not); a line whose ``correct`` contradicts its status, or without ``correct`` and with a status this
        reader does not know, is refused by name. Never a silent default that changes a metric."""
        if not isinstance(data, dict):
            return data
        data = {**data, **{key: cls.model_fields[key].default for key in NULL_MEANS_DEFAULT if
                           key in data and data[key] is None}}
        status = data.get("status")
        known = status == PASS_STATUS or status in FAILURE_STATUSES or status in EXCLUDED_STATUSES
        if data.get("correct") is None:
            if not known:
                raise ValueError(f"no 'correct' and status {status!r} is not one this reader knows "
                                 f"(ok, {', '.join(sorted(FAILURE_STATUSES | EXCLUDED_STATUSES))})")
            data["correct"] = status == PASS_STATUS
        elif data["correct"] is True and status != PASS_STATUS:
            raise ValueError(f"'correct' is true but status is {status!r}: a pass has status 'ok'")
        return data

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.sample)

    @property
    def excluded(self) -> bool:
        """An endpoint or infrastructure failure: not the model's outcome."""
        return self.status in EXCLUDED_STATUSES


def read_results(path: Path | str) -> list[RunResult]:
    """Every line of a results file; ConfigError (one line, naming file and line) on a broken one."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such results file; pass the JSONL written by `cuda-agent run --out`")
    results = []
    with path.open(encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                results.append(RunResult.model_validate_json(line))
            except ValidationError as exc:
                first = exc.errors(include_url=False)[0]
                where = ".".join(str(part) for part in first.get("loc", ())) or "line"
                raise ConfigError(
                    f"{path}:{number}: not a run result ({where}: {first.get('msg')}); fix or delete that line"
                ) from None
    return results


def latest(results: Iterable[RunResult]) -> dict[tuple[str, int], RunResult]:
    """The last line of each (task, sample): a re-run's answer replaces an excluded one."""
    out: dict[tuple[str, int], RunResult] = {}
    for result in results:
        out[result.key] = result
    return out


class ResultsFile:
    """The results JSONL a run appends to (one line per finished sample, flushed and fsynced)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_tail()

    def _repair_tail(self) -> None:
        """Drop a last line cut by a kill mid-write (everything before it is kept)."""
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        with self.path.open("r+b") as stream:
            stream.truncate(keep)

    def finished(self) -> set[tuple[str, int]]:
        """(task, sample) pairs already finished (excluded statuses are not: they are retried)."""
        if not self.path.is_file():
            return set()
        return {key for key, result in latest(read_results(self.path)).items() if not result.excluded}

    def append(self, result: RunResult) -> None:
        line = result.model_dump_json() + "\n"
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(line)
            stream.flush()
            os.fsync(stream.fileno())

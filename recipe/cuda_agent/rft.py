"""Stage 2, rejection fine-tuning data: the trajectories worth imitating (the paper, section 3).

Keeps trajectories with reward > 0 and drops infrastructure failures, malformed or hallucinated
tool calls (unparsable, unknown tool, arguments that fail the tool's schema) and redundant loops
(the same call repeated, many turns with no file change). Each dropped trajectory is counted
under the first rule it trips (``RULES`` order), and every rule also counts all the trajectories
that trip it. The kept records are written as one parquet file that veRL's
``MultiTurnSFTDataset`` loads (cuda_agent.recipe.records) and value pre-training reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import ConfigError
from cuda_agent.recipe.records import TrajectoryFlags, TrajectoryRecord, flags_from_messages, read_records, write_parquet

RULES = (
    "infra_failure",
    "not_positive_reward",
    "malformed_calls",
    "unknown_tools",
    "schema_errors",
    "repeated_calls",
    "idle_turns",
)
"""The rules, in the order a trajectory is checked."""


class RftThresholds(BaseModel):
    """What a kept trajectory may show."""

    model_config = ConfigDict(extra="forbid")

    min_reward: float = Field(0.0, description="Keep rewards strictly above this (the paper: R > 0).")
    max_malformed_calls: int = Field(0, ge=0, description="Unparsable calls or non-object arguments allowed.")
    max_unknown_tool_calls: int = Field(0, ge=0, description="Calls of tools that do not exist allowed.")
    max_schema_errors: int = Field(0, ge=0, description="Calls whose arguments fail the tool schema allowed.")
    max_repeated_calls: int = Field(3, ge=1, description="Longest run of identical consecutive calls allowed.")
    max_idle_turns: int = Field(
        20, ge=1, description="Longest run of assistant turns without a workspace file change allowed."
    )


class RuleCount(BaseModel):
    """One rule's effect."""

    model_config = ConfigDict(extra="forbid")

    rule: str = Field(description="Rule name (RULES).")
    threshold: str = Field(description="What the rule allows, as text.")
    dropped: int = Field(0, description="Trajectories dropped by this rule (the first rule they trip).")
    tripped: int = Field(0, description="Trajectories that trip this rule, whatever else they trip.")


class RftReport(BaseModel):
    """What ``rft filter`` read, kept and dropped."""

    model_config = ConfigDict(extra="forbid")

    read: int = Field(description="Trajectories read.")
    kept: int = Field(description="Trajectories written.")
    demonstrations: int = Field(0, description="Of those kept, demonstrations (`TrajectoryRecord.demonstration`): "
                                "known solutions written through the tools, not the policy's own rollouts.")
    rules: list[RuleCount] = Field(description="Per rule, in order.")
    output: str | None = Field(None, description="The parquet file written.")


def effective_flags(record: TrajectoryRecord) -> TrajectoryFlags:
    """The stored flags, raised to what the messages show for the call defects (records written
    without flags still get filtered); idle turns stay as stored (the writer may have measured them)."""
    seen = flags_from_messages(record.messages, record.tools)
    stored = record.flags
    return stored.model_copy(
        update={
            "malformed_calls": max(stored.malformed_calls, seen.malformed_calls),
            "unknown_tool_calls": max(stored.unknown_tool_calls, seen.unknown_tool_calls),
            "schema_errors": max(stored.schema_errors, seen.schema_errors),
            "max_repeated_calls": max(stored.max_repeated_calls, seen.max_repeated_calls),
        }
    )


def tripped_rules(record: TrajectoryRecord, thresholds: RftThresholds) -> list[str]:
    """The rules ``record`` trips, in RULES order (empty: keep it)."""
    flags = effective_flags(record)
    checks = {
        "infra_failure": record.infra_failure,
        # an infrastructure failure has no reward of its own: counted under its own rule only
        "not_positive_reward": not record.infra_failure
        and (record.reward is None or record.reward <= thresholds.min_reward),
        "malformed_calls": flags.malformed_calls > thresholds.max_malformed_calls,
        "unknown_tools": flags.unknown_tool_calls > thresholds.max_unknown_tool_calls,
        "schema_errors": flags.schema_errors > thresholds.max_schema_errors,
        "repeated_calls": flags.max_repeated_calls > thresholds.max_repeated_calls,
        "idle_turns": flags.max_idle_turns > thresholds.max_idle_turns,
    }
    return [rule for rule in RULES if checks[rule]]


def _threshold_text(thresholds: RftThresholds) -> dict[str, str]:
    return {
        "infra_failure": "none",
        "not_positive_reward": f"reward > {thresholds.min_reward:g}",
        "malformed_calls": f"<= {thresholds.max_malformed_calls}",
        "unknown_tools": f"<= {thresholds.max_unknown_tool_calls}",
        "schema_errors": f"<= {thresholds.max_schema_errors}",
        "repeated_calls": f"run <= {thresholds.max_repeated_calls}",
        "idle_turns": f"run <= {thresholds.max_idle_turns}",
    }


def check_trainable(record: TrajectoryRecord, where: str) -> None:
    """Raise ConfigError unless the trajectory ends on the model's own turn (bad input)."""
    if not record.ends_with_assistant:
        raise ConfigError(
            f"{where}: trajectory {record.task_id!r} (sample {record.sample}) ends with a "
            f"{record.messages[-1]['role']!r} message, not an assistant turn; fix the writer or drop the file"
        )


def filter_records(
    records: Iterable[TrajectoryRecord], thresholds: RftThresholds
) -> tuple[list[TrajectoryRecord], RftReport]:
    """(kept records, report)."""
    texts = _threshold_text(thresholds)
    counts = {rule: RuleCount(rule=rule, threshold=texts[rule]) for rule in RULES}
    kept: list[TrajectoryRecord] = []
    read = 0
    for record in records:
        read += 1
        check_trainable(record, f"trajectory {read}")
        tripped = tripped_rules(record, thresholds)
        for rule in tripped:
            counts[rule].tripped += 1
        if tripped:
            counts[tripped[0]].dropped += 1
        else:
            kept.append(record)
    return kept, RftReport(read=read, kept=len(kept), demonstrations=sum(r.demonstration is not None for r in kept),
                           rules=list(counts.values()))


def run_filter(paths: list[Path], out: Path, thresholds: RftThresholds) -> RftReport:
    """Read trajectory files or folders, filter, write ``out``; ConfigError when nothing is kept."""
    if out.suffix != ".parquet":
        raise ConfigError(f"--out {out}: the output must be a .parquet file")
    kept, report = filter_records(read_records(paths), thresholds)
    if not kept:
        raise ConfigError(
            f"no trajectory passed the filter ({report.read} read; "
            + ", ".join(f"{c.rule}: {c.dropped}" for c in report.rules if c.dropped)
            + "); nothing written. Collect more trajectories or loosen the thresholds"
        )
    write_parquet(kept, out)
    return report.model_copy(update={"output": str(out)})

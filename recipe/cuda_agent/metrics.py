"""Per-trajectory metrics, reported through veRL's channels.

veRL 0.9.1 has two per-sample channels: ``AgentLoopMetrics`` (fixed timing fields, logged as
``agent_loop/*`` timing by the v0 trainer) and ``reward_extra_info`` (dumped with rollouts and
validation generations, averaged per data source into ``val-aux/<source>/<key>/...``). Timings
go to the first; counts go to the second under ``agent/*`` keys, the same keys on every sample.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # veRL loads only where its record is built: the standalone runner runs without veRL
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics

_COMPILE = re.compile(r"compile\.sh|utils[./]compile")
_VERIFY = re.compile(r"utils[./]verification")


class StopReason:
    """Why a trajectory ended (values of ``agent/stop_reason``)."""

    MODEL_DONE = "model_done"
    TURN_LIMIT = "turn_limit"
    LENGTH_LIMIT = "length_limit"
    INFRA_FAILURE = "infra_failure"


class TrajectoryMetrics(BaseModel):
    """Counters and timers of one trajectory."""

    model_config = ConfigDict(extra="forbid")

    turns: int = Field(0, description="Assistant turns.")
    tool_calls: int = Field(0, description="Tool calls run or refused.")
    tool_errors: int = Field(0, description="Calls whose observation is an error (refused ones included).")
    malformed_calls: int = Field(0, description="Calls refused before running (unparsable, unknown tool, bad JSON).")
    calls_by_tool: dict[str, int] = Field(default_factory=dict, description="Calls per tool name.")
    compiles: int = Field(0, description="Bash calls that ran the compile script.")
    compile_passes: int = Field(0, description="... and exited 0.")
    verifies: int = Field(0, description="Bash calls that ran verification.")
    verify_passes: int = Field(0, description="... and exited 0.")
    generation_s: float = Field(0.0, description="Time waiting for the LLM.")
    tools_s: float = Field(0.0, description="Time running tools.")
    evaluation_s: float = Field(0.0, description="Time of the final evaluation.")
    response_tokens: int = Field(0, description="Response tokens (model + observations).")
    stop_reason: str = Field("", description="A StopReason value.")
    num_preempted: int = Field(-1, description="LLM server preemptions (-1: not reported).")

    @contextmanager
    def timer(self, field: str) -> Iterator[None]:
        """Add the elapsed time of the block to ``field``."""
        started = time.monotonic()
        try:
            yield
        finally:
            setattr(self, field, getattr(self, field) + time.monotonic() - started)

    def record_call(
        self, name: str, arguments: dict[str, Any] | None, *, is_error: bool, refused: bool, exit_code: int | None
    ) -> None:
        """Count one tool call (compiles and verifications are Bash calls running the skill scripts)."""
        self.tool_calls += 1
        self.tool_errors += int(is_error)
        self.malformed_calls += int(refused)
        key = name or "<unparsed>"
        self.calls_by_tool[key] = self.calls_by_tool.get(key, 0) + 1
        command = str((arguments or {}).get("command", "")) if name == "Bash" and not refused else ""
        passed = exit_code == 0 and not is_error
        if _COMPILE.search(command):
            self.compiles += 1
            self.compile_passes += int(passed)
        if _VERIFY.search(command):
            self.verifies += 1
            self.verify_passes += int(passed)

    def agent_loop_metrics(self) -> AgentLoopMetrics:
        """veRL's timing record."""
        from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics

        return AgentLoopMetrics(
            generate_sequences=self.generation_s,
            tool_calls=self.tools_s,
            compute_score=self.evaluation_s,
            num_preempted=self.num_preempted,
        )

    def to_extra_info(self, tool_names: list[str]) -> dict[str, Any]:
        """Flat ``agent/*`` entries; one ``agent/calls/<tool>`` per known tool, so keys never vary."""
        info: dict[str, Any] = {
            "agent/turns": self.turns,
            "agent/tool_calls": self.tool_calls,
            "agent/tool_errors": self.tool_errors,
            "agent/malformed_calls": self.malformed_calls,
            "agent/compiles": self.compiles,
            "agent/compile_passes": self.compile_passes,
            "agent/verifies": self.verifies,
            "agent/verify_passes": self.verify_passes,
            "agent/generation_s": self.generation_s,
            "agent/tools_s": self.tools_s,
            "agent/evaluation_s": self.evaluation_s,
            "agent/response_tokens": self.response_tokens,
            "agent/stop_reason": self.stop_reason,
        }
        for name in tool_names:
            info[f"agent/calls/{name}"] = self.calls_by_tool.get(name, 0)
        return info

"""``cuda-agent run``: the training agent on a set of tasks, against an OpenAI-compatible endpoint.

Each (task, sample) is one trajectory of the same agent as training — SKILL.md and the task in
the system prompt, our tools in a terminal sandbox over a fresh workspace, the turn and context
limits, the trusted evaluator on the final workspace — driven by ``cuda_agent.recipe.turns``
(the veRL loop's own turn implementation) with a ``ChatPolicy``. Modes: ``agentic``,
``single-turn`` (one answer with fenced files, parsed like training's stage 1), ``solutions``
(re-score existing ``model_new.py`` + ``kernels/`` folders, no model).

Every finished sample is appended to the results JSONL at once (and its trajectory written with
``RecordWriter``), so an interrupted run loses nothing finished and a re-run skips it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.evaluation.chat_policy import ChatPolicy
from cuda_agent.evaluation.client import ChatClient, EndpointConfig, EndpointError
from cuda_agent.evaluation.demonstration import DemonstrationPolicy
from cuda_agent.evaluation.results import ENDPOINT_ERROR, INFRA_ERROR, ResultsFile, RunResult
from cuda_agent.evaluation.tasks import Task
from cuda_agent.recipe.loop_config import CudaAgentLoopConfig, LoopLimits
from cuda_agent.recipe.metrics import TrajectoryMetrics
from cuda_agent.recipe.records import RecordWriter, TrajectoryRecord, flags_from_messages, now_utc
from cuda_agent.recipe.turns import INFRA_ERRORS, Episode, Verdict, evaluate_workspace, infra_verdict
from cuda_agent.reward_fns.options import RewardOptions, TaskSpec
from cuda_agent.sandbox_pool.harness import EvalResult, EvalStatus

logger = logging.getLogger(__name__)

Mode = Literal["agentic", "single-turn", "solutions", "demonstrations"]
TIME_LIMIT = "time_limit"
"""Stop reason of a trajectory cut by --task-timeout (its workspace is still evaluated)."""
MAX_LOG_CHARS = 4000


class RunConfig(BaseModel):
    """Everything a run needs besides the tasks and the endpoint."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    mode: Mode = Field("agentic", description="agentic, single-turn, solutions (re-scored) or demonstrations (the "
                       "solutions written through the tools by a scripted agent: evaluation/demonstration.py).")
    samples: int = Field(1, ge=1, description="Samples per task.")
    concurrency: int = Field(4, ge=1, description="(task, sample) pairs in flight at once.")
    results: Path = Field(description="Results JSONL (appended; finished pairs are skipped).")
    records: Path | None = Field(None, description="Folder of trajectory records (None: no records).")
    loop: CudaAgentLoopConfig = Field(default_factory=CudaAgentLoopConfig, description="Limits, sandbox, SKILL.md.")
    reward: RewardOptions = Field(default_factory=RewardOptions, description="Reward schedule and pool.")
    task_timeout_s: float | None = Field(None, gt=0, description="Wall limit of one trajectory (then evaluated).")
    solutions: Path | None = Field(None, description="Folder of <task_id>/model_new.py + kernels/ (modes solutions "
                                   "and demonstrations).")


class RunSummary(BaseModel):
    """Counts of one invocation."""

    model_config = ConfigDict(extra="forbid")

    total: int = 0
    skipped: int = 0
    done: int = 0
    passed: int = 0
    faster_than_compile: int = 0
    excluded: int = 0


ProgressHook = Callable[[RunResult], None]


class Runner:
    """Runs (task, sample) pairs with bounded concurrency, appending results as they finish."""

    def __init__(self, config: RunConfig, endpoint: EndpointConfig | None, *, preflight: bool = True):
        """`preflight`: check the endpoint before the first task (``ChatClient.check``); False where the caller
        already did (the CLI checks before anything heavy loads)."""
        if config.mode not in ("solutions", "demonstrations") and endpoint is None:
            raise ValueError("an endpoint is needed unless re-scoring or demonstrating solutions")
        if config.mode in ("solutions", "demonstrations") and config.solutions is None:
            raise ValueError(f"mode {config.mode} needs the solutions folder")
        self.config = config
        self.endpoint = endpoint
        self.preflight = preflight
        self.results = ResultsFile(config.results)
        self.writer = RecordWriter(config.records, shard_prefix="run") if config.records else None
        self.client: ChatClient | None = None
        self._skill: str | None = None
        self._schemas: list[dict[str, Any]] | None = None

    def pending(self, tasks: list[Task]) -> list[tuple[Task, int]]:
        finished = self.results.finished()
        return [(task, sample) for task in self.runnable(tasks) for sample in range(self.config.samples)
                if (task.task_id, sample) not in finished]

    def runnable(self, tasks: list[Task]) -> list[Task]:
        """The tasks this run can do: all, except in demonstrations mode those without a solution folder."""
        if self.config.mode != "demonstrations":
            return tasks
        return [task for task in tasks if self._solution_folder(task).is_dir()]

    async def run(self, tasks: list[Task], on_result: ProgressHook | None = None) -> RunSummary:
        pending = self.pending(tasks)
        summary = RunSummary(total=len(self.runnable(tasks)) * self.config.samples)
        summary.skipped = summary.total - len(pending)
        if not pending:
            return summary
        from cuda_agent.reward_fns.evaluation import aclose_embedded

        semaphore = asyncio.Semaphore(self.config.concurrency)

        async def one(task: Task, sample: int) -> None:
            async with semaphore:
                result = await self.run_sample(task, sample)
            self.results.append(result)
            summary.done += 1
            summary.passed += int(result.correct)
            summary.faster_than_compile += int(result.correct and (result.speedup_vs_compile or 0) > 1)
            summary.excluded += int(result.excluded)
            if on_result is not None:
                on_result(result)

        try:
            # torch and the harness load once, off the event loop: an import inside the loop stalls every
            # trajectory in flight (and the request timeouts with it) for seconds
            await asyncio.to_thread(_preload)
            if self.endpoint is not None:
                self.client = ChatClient(self.endpoint)
                if self.preflight:
                    for warning in await self.client.check():
                        logger.warning("%s", warning)
            await asyncio.gather(*(one(task, sample) for task, sample in pending))
        finally:
            if self.client is not None:
                await self.client.__aexit__(None, None, None)
            await aclose_embedded()
            if self.writer is not None:
                self.writer.close()
        return summary

    # -- one sample ------------------------------------------------------------------------
    async def run_sample(self, task: Task, sample: int) -> RunResult:
        started = time.monotonic()
        spec = TaskSpec(task_id=task.task_id, problem_src=task.problem_src, device=task.device,
                        precision_policy=task.precision_policy)
        if self.config.mode == "solutions":
            verdict = await self._rescore(task, spec)
            return self._result(task, sample, verdict, TrajectoryMetrics(), None, started)
        metrics = TrajectoryMetrics()
        schemas = self._tool_schemas() if self.config.mode == "agentic" else None
        limits = self._limits(task)
        policy: ChatPolicy | DemonstrationPolicy
        if self.config.mode == "demonstrations":
            from cuda_agent.reward_fns.scoring import load_snapshot

            schemas = self._tool_schemas()
            policy = DemonstrationPolicy(load_snapshot(self._solution_folder(task)), schemas)
        else:
            assert self.client is not None
            policy = ChatPolicy(self.client, schemas, limits.max_total_tokens)
        messages = self._messages(task, spec)
        error: str | None = None
        try:
            if self.config.mode in ("agentic", "demonstrations"):
                verdict = await self._agentic(spec, messages, policy, limits, metrics)
            else:
                verdict = await self._single_turn(spec, messages, policy, limits, metrics)
        except EndpointError as exc:
            error = f"endpoint error: {exc}"
            verdict = None
        except INFRA_ERRORS as exc:  # the sandbox could not even start
            verdict = infra_verdict(spec, self.config.reward, exc)
        result = self._result(task, sample, verdict, metrics, policy, started, error)
        if self.writer is not None:
            self._write_record(task, sample, messages, schemas or [], result, policy)
        return result

    async def _agentic(self, spec: TaskSpec, messages: list[dict[str, Any]], policy: ChatPolicy, limits: LoopLimits,
                       metrics: TrajectoryMetrics) -> Verdict:
        from cuda_agent.recipe.environment import open_environment

        pool_address = self.config.reward.resolved_pool_address()
        async with open_environment(spec, self.config.loop, pool_address) as env:
            episode = Episode(env, policy, limits, metrics)
            await self._bounded(episode.run(messages), metrics)
            if episode.infra_error is not None:
                return infra_verdict(spec, self.config.reward, episode.infra_error)
            return await evaluate_workspace(env, spec, self.config.reward, metrics, self.config.loop.snapshot_dir)

    async def _single_turn(self, spec: TaskSpec, messages: list[dict[str, Any]], policy: ChatPolicy,
                           limits: LoopLimits, metrics: TrajectoryMetrics) -> Verdict:
        from cuda_agent.reward_fns.answer import parse_answer
        from cuda_agent.reward_fns.scoring import evaluate_files, reward_info

        episode = Episode(None, policy, limits.model_copy(update={"max_turns": 1}), metrics)  # type: ignore[arg-type]
        await self._bounded(episode.run(messages), metrics)
        answer = (messages[-1].get("content") or "") if messages[-1].get("role") == "assistant" else ""
        with metrics.timer("evaluation_s"):
            result = await evaluate_files(parse_answer(answer).files, spec, self.config.reward)
        return Verdict(reward_info(result, self.config.reward, spec.task_id), result)

    async def _rescore(self, task: Task, spec: TaskSpec) -> Verdict:
        from cuda_agent.errors import WorkspaceError
        from cuda_agent.reward_fns.scoring import evaluate_files, load_snapshot, no_answer_result, reward_info

        assert self.config.solutions is not None
        folder = self._solution_folder(task)
        try:
            files = load_snapshot(folder) if folder.is_dir() else {}
        except WorkspaceError as exc:
            result = no_answer_result(spec, str(exc))
        else:
            result = await evaluate_files(files, spec, self.config.reward) if files else no_answer_result(
                spec, f"no solution folder {folder}")
        return Verdict(reward_info(result, self.config.reward, spec.task_id), result)

    async def _bounded(self, episode_run: Any, metrics: TrajectoryMetrics) -> None:
        """The episode under --task-timeout; on expiry it stops and the workspace is evaluated as it is."""
        if self.config.task_timeout_s is None:
            await episode_run
            return
        try:
            async with asyncio.timeout(self.config.task_timeout_s) as scope:
                await episode_run
        except TimeoutError:
            if not scope.expired():
                raise
            metrics.stop_reason = TIME_LIMIT

    # -- building blocks -------------------------------------------------------------------
    @property
    def demonstration_source(self) -> str | None:
        """What a demonstration record names as its source ("solutions:<folder>"); None for a model's runs."""
        return f"solutions:{self.config.solutions}" if self.config.mode == "demonstrations" else None

    def _solution_folder(self, task: Task) -> Path:
        assert self.config.solutions is not None
        return self.config.solutions / task.task_id

    def _tool_schemas(self) -> list[dict[str, Any]]:
        if self._schemas is None:
            from cuda_agent.recipe.environment import tool_schemas

            self._schemas = tool_schemas()
        return self._schemas

    def _limits(self, task: Task) -> LoopLimits:
        limits = self.config.loop.limits
        return limits if task.max_turns is None else limits.model_copy(update={"max_turns": task.max_turns})

    def _messages(self, task: Task, spec: TaskSpec) -> list[dict[str, Any]]:
        from cuda_agent.recipe.task_prompts import agentic_prompt, single_turn_prompt

        if self.config.mode == "single-turn":
            if task.prompt is not None and task.prompt_mode == "single-turn":
                return [dict(message) for message in task.prompt]
            return single_turn_prompt(task.problem_src, task.device)
        from cuda_agent.recipe.prompt import build_messages, load_skill

        if self._skill is None:
            self._skill = load_skill(self.config.loop.skill_path)
        prompt = task.prompt if task.prompt is not None and task.prompt_mode == "agentic" else agentic_prompt(
            task.task_id, task.device)
        return build_messages(prompt, self._skill, spec)

    def _result(self, task: Task, sample: int, verdict: Verdict | None, metrics: TrajectoryMetrics,
                policy: "ChatPolicy | DemonstrationPolicy | None", started: float, error: str | None = None) -> RunResult:
        common: dict[str, Any] = dict(
            task_id=task.task_id, level=task.level, data_source=task.data_source, sample=sample,
            mode=self.config.mode, model=self.endpoint.model if self.endpoint and self.config.mode in ("agentic", "single-turn") else None,
            turns=metrics.turns, stop_reason=metrics.stop_reason or None, wall_s=time.monotonic() - started,
            tokens=policy.context_tokens if policy and policy.prompt_tokens is not None else None,
            completion_tokens=policy.completion_tokens if policy and policy.requests else None, created=now_utc(),
        )
        if verdict is None:
            return RunResult(**common, status=ENDPOINT_ERROR, error=(error or "endpoint error")[:2000])
        info = verdict.info
        if info.infra_failure:
            return RunResult(**common, status=INFRA_ERROR, error=info.error[:2000],
                             evaluation=_evaluation(verdict.result))
        return RunResult(
            **common, status=info.status,
            correct=info.status == EvalStatus.OK.value and info.correct is True and not info.violation,
            reward=info.kernel_reward, **info.speed(), error=info.error[:2000],
            evaluation=_evaluation(verdict.result),
        )

    def _write_record(self, task: Task, sample: int, messages: list[dict[str, Any]], schemas: list[dict[str, Any]],
                      result: RunResult, policy: "ChatPolicy | DemonstrationPolicy") -> None:
        assert self.writer is not None
        record = TrajectoryRecord(
            messages=messages, tools=schemas, reward=result.reward, status=result.status,
            infra_failure=result.excluded, task_id=task.task_id, data_source=task.data_source, sample=sample,
            turns=result.turns, prompt_tokens=policy.prompt_tokens, response_tokens=policy.response_tokens,
            stop_reason=result.stop_reason, flags=flags_from_messages(messages, schemas), model=result.model,
            created=result.created, demonstration=self.demonstration_source,
        )
        self.writer.write(record)


def _preload() -> None:
    import cuda_agent.reward_fns.scoring  # noqa: F401
    import cuda_agent.sandbox_pool.harness.evaluator  # noqa: F401
    import cuda_agent.sandbox_pool.pool  # noqa: F401
    import cuda_agent.tools  # noqa: F401


def _evaluation(result: EvalResult | None) -> dict[str, Any] | None:
    """The evaluator's verdicts per stage, its timing receipt and its warnings (a reward lowered by the timings'
    confidence intervals, a load seen in the timing window), logs cut for the results line."""
    if result is None:
        return None
    data = result.model_dump(mode="json", include={"stages", "receipt", "timings", "violations", "warnings", "wall_s"})
    for stage in (data.get("stages") or {}).values():
        log = stage.get("log") or ""
        if len(log) > MAX_LOG_CHARS:
            stage["log"] = log[:MAX_LOG_CHARS] + f"\n... [{len(log) - MAX_LOG_CHARS} characters cut]"
    return data

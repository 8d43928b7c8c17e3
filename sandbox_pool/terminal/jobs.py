"""Background jobs: ids, states and incremental output, shared by every backend.

A backend starts the job with stdout/stderr going to two host files and keeps its own
handle (a process, a docker exec); this table hands out ids, enforces the limit on
running jobs, and turns "output since the last poll" into a `BackgroundStatus`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Literal

from cuda_agent.errors import ToolCallError
from cuda_agent.sandbox_pool.terminal.base import BackgroundStatus
from cuda_agent.sandbox_pool.terminal.output import read_capped

JobState = Literal["running", "exited", "killed"]


@dataclass
class Job:
    """One background job and what has been reported of its output."""

    job_id: str
    command: str
    out_path: str
    err_path: str
    handle: Any = None
    state: JobState = "running"
    exit_code: int | None = None
    out_offset: int = 0
    err_offset: int = 0


class JobTable:
    """The background jobs of one sandbox."""

    def __init__(self, max_running: int) -> None:
        self.max_running = max_running
        self._jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)

    def new_id(self) -> str:
        if self.running_count() >= self.max_running:
            raise ToolCallError(
                f"{self.max_running} background jobs are already running: kill one (KillBash) first"
            )
        return f"bash_{next(self._ids)}"

    def add(self, job: Job) -> None:
        self._jobs[job.job_id] = job

    def get(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise ToolCallError(f"no background job {job_id!r} (known: {', '.join(self._jobs) or 'none'})") from None

    def running(self) -> list[Job]:
        return [job for job in self._jobs.values() if job.state == "running"]

    def running_count(self) -> int:
        return len(self.running())

    def all(self) -> list[Job]:
        return list(self._jobs.values())

    @staticmethod
    def report(job: Job, max_bytes: int) -> BackgroundStatus:
        """Status with the output produced since the previous report (head and tail if long)."""
        out, cut_out, job.out_offset = read_capped(job.out_path, max_bytes, job.out_offset)
        err, cut_err, job.err_offset = read_capped(job.err_path, max_bytes, job.err_offset)
        return BackgroundStatus(
            job_id=job.job_id,
            state=job.state,
            exit_code=job.exit_code,
            new_stdout=out,
            new_stderr=err,
            truncated=cut_out or cut_err,
        )

"""Bash, BashOutput and KillBash."""

from __future__ import annotations

from cuda_agent.errors import SandboxTimeoutError, ToolCallError
from cuda_agent.sandbox_pool.terminal.base import BackgroundStatus, CommandResult
from cuda_agent.tools.args import BashArgs, BashOutputArgs, KillBashArgs
from cuda_agent.tools.observation import ToolErrorKind, ToolObservation, ToolUsageError
from cuda_agent.tools.registry import tool
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.text import truncate_middle


def _join(stdout: str, stderr: str) -> str:
    parts = [part.rstrip("\n") for part in (stdout, stderr) if part.strip()]
    return "\n".join(parts)


def _render_result(result: CommandResult, timeout_s: float, max_chars: int) -> tuple[str, bool]:
    body, cut = truncate_middle(_join(result.stdout, result.stderr), max_chars)
    notes = []
    if result.truncated:
        notes.append("[the sandbox truncated the command's output; redirect it to a file and Read or Grep it]")
    if result.timed_out:
        notes.append(
            f"[timed out after {timeout_s:g} s and was killed; pass a larger timeout (ms) "
            "or use run_in_background=true and poll with BashOutput]"
        )
    elif result.exit_code != 0:
        notes.append(f"[exit code {result.exit_code}]")
    text = "\n".join(part for part in (body, *notes) if part)
    return text or "(no output)", cut or result.truncated


def _timeout_s(session: ToolSession, timeout_ms: int | None) -> tuple[float, str]:
    config = session.config
    requested = timeout_ms or config.bash_default_timeout_ms
    if requested > config.bash_max_timeout_ms:
        return config.bash_max_timeout_ms / 1000, f"[timeout capped at {config.bash_max_timeout_ms} ms]\n"
    return requested / 1000, ""


async def _start_background(session: ToolSession, command: str) -> ToolObservation:
    running = [job for job in session.background_jobs if job not in session.finished_jobs]
    if len(running) >= session.config.max_background_jobs:
        raise ToolUsageError(
            ToolErrorKind.TOO_MANY_JOBS,
            f"{len(running)} background jobs are running ({', '.join(running)}); "
            "stop one with KillBash before starting another.",
        )
    try:
        job_id = await session.sandbox.start_background(command)
    except ToolCallError as exc:  # the sandbox's own limit on running jobs
        raise ToolUsageError(ToolErrorKind.TOO_MANY_JOBS, f"{exc}; stop a job with KillBash first.") from exc
    session.background_jobs[job_id] = command
    return ToolObservation(
        name="Bash",
        text=f"Started background job {job_id}. Read its output with BashOutput(bash_id='{job_id}'); "
        f"stop it with KillBash(shell_id='{job_id}').",
    )


@tool("Bash", BashArgs)
async def bash(session: ToolSession, args: BashArgs) -> ToolObservation:
    """Run a command in the workspace root (foreground with a timeout, or in the background)."""
    if args.run_in_background:
        return await _start_background(session, args.command)
    timeout_s, notice = _timeout_s(session, args.timeout)
    try:
        result = await session.sandbox.run(args.command, timeout_s=timeout_s)
    except SandboxTimeoutError as exc:
        message = f"the command did not finish within {timeout_s:g} s: {exc}"
        raise ToolUsageError(ToolErrorKind.TIMEOUT, message) from exc
    text, cut = _render_result(result, timeout_s, session.config.max_output_chars)
    return ToolObservation(
        name="Bash",
        text=notice + text,
        is_error=result.timed_out,
        error=ToolErrorKind.TIMEOUT if result.timed_out else None,
        metrics={
            "exit_code": float(result.exit_code),
            "timed_out": float(result.timed_out),
            "truncated": float(cut),
            "command_s": result.duration_s,
        },
    )


def _job(session: ToolSession, job_id: str, argument: str) -> str:
    if job_id not in session.background_jobs:
        known = ", ".join(session.background_jobs) or "none"
        raise ToolUsageError(
            ToolErrorKind.UNKNOWN_JOB,
            f"No background job with {argument}='{job_id}' (jobs of this session: {known}). "
            "Start one with Bash(command=..., run_in_background=true).",
        )
    return job_id


def _render_status(status: BackgroundStatus, max_chars: int) -> str:
    state = status.state if status.exit_code is None else f"{status.state} (exit code {status.exit_code})"
    output, _ = truncate_middle(_join(status.new_stdout, status.new_stderr), max_chars)
    cut = "\n[the sandbox truncated this output in the middle]" if status.truncated else ""
    return f"Job {status.job_id}: {state}\n{output or '(no new output)'}{cut}"


@tool("BashOutput", BashOutputArgs)
async def bash_output(session: ToolSession, args: BashOutputArgs) -> ToolObservation:
    """Output a background job produced since the last BashOutput, and its state."""
    status = await session.sandbox.poll_background(_job(session, args.bash_id, "bash_id"))
    if status.state != "running":
        session.finished_jobs.add(status.job_id)
    return ToolObservation(name="BashOutput", text=_render_status(status, session.config.max_output_chars))


@tool("KillBash", KillBashArgs)
async def kill_bash(session: ToolSession, args: KillBashArgs) -> ToolObservation:
    """Kill a background job; its last output is shown."""
    job_id = _job(session, args.shell_id, "shell_id")
    status = await session.sandbox.kill_background(job_id)
    session.finished_jobs.add(job_id)
    return ToolObservation(name="KillBash", text=_render_status(status, session.config.max_output_chars))

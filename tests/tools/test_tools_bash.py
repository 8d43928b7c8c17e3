"""Bash, BashOutput, KillBash and TodoWrite."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cuda_agent.tools import ToolErrorKind, ToolSession, ToolsConfig, call_tool


async def test_bash_runs_in_the_workspace_root(session: ToolSession, workspace: Path) -> None:
    obs = await call_tool(session, "Bash", {"command": "ls model.py && echo out && echo err >&2"})
    assert not obs.is_error and "model.py" in obs.text and "out" in obs.text and "err" in obs.text
    assert obs.metrics["exit_code"] == 0 and "exit code" not in obs.text


async def test_bash_reports_exit_codes_and_empty_output(session: ToolSession) -> None:
    obs = await call_tool(session, "Bash", {"command": "exit 3"})
    assert not obs.is_error and obs.text == "[exit code 3]" and obs.metrics["exit_code"] == 3
    assert (await call_tool(session, "Bash", {"command": "true"})).text == "(no output)"


async def test_bash_timeout_in_ms(session: ToolSession) -> None:
    obs = await call_tool(session, "Bash", {"command": "sleep 5", "timeout": 300})
    assert obs.is_error and obs.error is ToolErrorKind.TIMEOUT and "timed out after 0.3 s" in obs.text
    assert obs.metrics["duration_s"] < 4


async def test_bash_timeout_is_capped(workspace: Path, sandbox) -> None:
    session = ToolSession(sandbox, ToolsConfig(bash_max_timeout_ms=1000))
    obs = await call_tool(session, "Bash", {"command": "echo hi", "timeout": 10_000_000})
    assert obs.text.startswith("[timeout capped at 1000 ms]") and "hi" in obs.text


async def test_bash_truncates_long_output_in_the_middle(workspace: Path, sandbox) -> None:
    session = ToolSession(sandbox, ToolsConfig(max_output_chars=1000))
    obs = await call_tool(session, "Bash", {"command": "echo FIRST; seq 1 5000; echo LAST"})
    assert len(obs.text) < 1100 and "FIRST" in obs.text and "LAST" in obs.text
    assert "characters omitted" in obs.text and obs.metrics["truncated"] == 1


async def test_bash_accepts_claude_code_description(session: ToolSession) -> None:
    obs = await call_tool(session, "Bash", {"command": "echo ok", "description": "Print ok"})
    assert obs.text == "ok"


async def test_background_job_lifecycle(session: ToolSession) -> None:
    obs = await call_tool(session, "Bash", {"command": "echo started; sleep 30", "run_in_background": True})
    assert not obs.is_error and "BashOutput" in obs.text
    (job_id,) = session.background_jobs
    for _ in range(50):
        out = await call_tool(session, "BashOutput", {"bash_id": job_id})
        if "started" in out.text:
            break
        await asyncio.sleep(0.1)
    assert f"Job {job_id}: running" in out.text and "started" in out.text
    again = await call_tool(session, "BashOutput", {"bash_id": job_id})
    assert "(no new output)" in again.text
    killed = await call_tool(session, "KillBash", {"shell_id": job_id})
    assert not killed.is_error and "killed" in killed.text
    after = await call_tool(session, "BashOutput", {"bash_id": job_id})
    assert "killed" in after.text


async def test_background_job_that_exits(session: ToolSession) -> None:
    await call_tool(session, "Bash", {"command": "echo done; exit 2", "run_in_background": True})
    (job_id,) = session.background_jobs
    for _ in range(50):
        out = await call_tool(session, "BashOutput", {"bash_id": job_id})
        if "exited" in out.text:
            break
        await asyncio.sleep(0.1)
    assert "exited (exit code 2)" in out.text
    assert job_id in session.finished_jobs


async def test_unknown_job_ids_and_job_limit(workspace: Path, sandbox) -> None:
    session = ToolSession(sandbox, ToolsConfig(max_background_jobs=1))
    for name, args in [("BashOutput", {"bash_id": "nope"}), ("KillBash", {"shell_id": "nope"})]:
        obs = await call_tool(session, name, args)
        assert obs.error is ToolErrorKind.UNKNOWN_JOB and "run_in_background" in obs.text
    await call_tool(session, "Bash", {"command": "sleep 30", "run_in_background": True})
    obs = await call_tool(session, "Bash", {"command": "sleep 30", "run_in_background": True})
    assert obs.error is ToolErrorKind.TOO_MANY_JOBS and "KillBash" in obs.text
    await session.close()  # kills the running job


async def test_todowrite_keeps_a_per_session_list(session: ToolSession) -> None:
    todos = [
        {"content": "Profile the reference", "status": "completed", "activeForm": "Profiling the reference"},
        {"content": "Write the kernel", "status": "in_progress", "activeForm": "Writing the kernel"},
        {"content": "Verify", "status": "pending", "activeForm": "Verifying"},
    ]
    obs = await call_tool(session, "TodoWrite", {"todos": todos})
    assert obs.text.splitlines() == [
        "Todo list (3 items: 1 completed, 1 in progress, 1 pending):",
        "[x] Profile the reference",
        "[>] Writing the kernel",
        "[ ] Verify",
    ]
    assert [t.content for t in session.todos] == ["Profile the reference", "Write the kernel", "Verify"]
    two = [dict(todos[1]), dict(todos[1], content="Other")]
    assert "exactly one item in_progress" in (await call_tool(session, "TodoWrite", {"todos": two})).text
    assert (await call_tool(session, "TodoWrite", {"todos": []})).text == "Todo list is empty."


async def test_todowrite_rejects_malformed_items(session: ToolSession) -> None:
    bad = [{"content": "x", "status": "doing", "activeForm": "x"}]
    obs = await call_tool(session, "TodoWrite", {"todos": bad})
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS and "todos.0.status" in obs.text
    obs = await call_tool(session, "TodoWrite", {"todos": [{"content": "x", "status": "pending"}]})
    assert "missing required argument 'todos.0.activeForm'" in obs.text

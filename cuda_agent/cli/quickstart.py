"""The README's first command: the whole system on the embedded default (CPU, local sandbox).

1. A scripted agent session: a stand-in for the LLM issues the tool calls a model would
   (read the task, profile, write a kernel, compile, verify, profile) in the local terminal
   sandbox; the trusted evaluator then scores the final workspace.
2. The example problem's sample solutions (fast, slow, cheating) evaluated end to end,
   with their rewards.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from cuda_agent.cli.contract import progress, require_device

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.harness import EvalResult

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROBLEM = "diag_matmul"
PROBLEM_FILE = {"cpu": "diag_matmul", "cuda": "diag_matmul_cuda"}  # sizes that suit each device
CANDIDATES = {"cpu": ["cpu_fast", "cpu_slow", "cpu_cheat"], "cuda": ["cuda_fast", "cuda_slow", "cuda_cheat"]}


def _problem_src(device: str) -> str:
    return (EXAMPLES / "problems" / f"{PROBLEM_FILE[device]}.py").read_text()


def _solution_files(device: str, name: str) -> dict[str, str]:
    from cuda_agent.sandbox_pool.workspace import read_candidate_files

    return read_candidate_files(EXAMPLES / "solutions" / PROBLEM / name)


def _scripted_calls(device: str) -> list[tuple[str, dict]]:
    """What the stand-in model does, as (tool name, arguments) pairs: the fast solution's demonstration."""
    from cuda_agent.evaluation.demonstration import demonstration_calls

    return demonstration_calls(_solution_files(device, f"{device}_fast"))


async def _agent_session(device: str, root: Path, console: Console) -> tuple[str, list]:
    from cuda_agent.sandbox_pool.harness import EvalJob, EvaluatorConfig, evaluate_job
    from cuda_agent.sandbox_pool.terminal.config import LocalSandboxConfig, create_sandbox
    from cuda_agent.sandbox_pool.workspace import create_workspace, read_candidate_files
    from cuda_agent.tools import ToolSession, call_tool

    ws = create_workspace(_problem_src(device), root / "agent_session", device)
    console.rule(f"scripted agent session (local sandbox, workspace {ws})")
    sandbox = create_sandbox(LocalSandboxConfig(), ws)
    with progress("starting the local sandbox"):
        await sandbox.start()
    session = ToolSession(sandbox)
    try:
        for name, args in _scripted_calls(device):
            shown = {k: (v if len(str(v)) < 60 else str(v)[:57] + "...") for k, v in args.items()}
            console.print(f"[bold cyan]> {name}[/bold cyan] {shown}")
            with progress(f"tool call {name}"):
                obs = await call_tool(session, name, args)
            text = obs.text.strip().splitlines()
            console.print("\n".join(text[:12]) + ("\n..." if len(text) > 12 else ""), markup=False, highlight=False)
    finally:
        await session.close()
        await sandbox.close()
    with progress("trusted evaluation of the agent's workspace (compile, verify, profile)"):
        result = await evaluate_job(EvalJob(problem_src=_problem_src(device), files=read_candidate_files(ws),
                                            device=device, task_id="agent_session"),
                                    EvaluatorConfig(device=device, window_check=True))
    return "final evaluation of the agent's workspace", [("agent_session", result)]


async def _sample_solutions(device: str, timed_calls: int, console: Console) -> tuple[str, list]:
    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, Evaluator, EvaluatorConfig

    rows = []
    async with Evaluator(EvaluatorConfig(device=device, window_check=True)) as evaluator:
        for name in CANDIDATES[device]:
            job = EvalJob(problem_src=_problem_src(device), files=_solution_files(device, name), device=device,
                          options=EvalOptions(timed_calls=timed_calls), task_id=name)
            with progress(f"evaluating sample solution {name} (compile, verify, profile)"):
                rows.append((name, await evaluator.evaluate(job)))
    return f"{PROBLEM}: sample solutions on {device}", rows


def _table(title: str, rows: list) -> Table:
    table = Table(title=title)
    for column in ("candidate", "status", "reward", "runtime us", "eager us", "compile us", "vs eager",
                   "vs compile", "note"):
        table.add_column(column)
    f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    for name, r in rows:
        table.add_row(name, r.status.value, f(r.reward), f(r.runtime_us), f(r.eager_us), f(r.torch_compile_us),
                      f(r.speedup_vs_eager), f(r.speedup_vs_compile), _note(r))
    return table


def _note(result: EvalResult) -> str:
    """The error, else the first warning (a lowered reward, a load seen in the timing window), shortened."""
    text = result.error or (result.warnings[0] if result.warnings else "")
    return text if len(text) <= 100 else text[:97] + "..."


def run_quickstart(device: str, timed_calls: int, agent: bool = True) -> int:
    """Exit code: 0 when every evaluation ran, 3 when any ended in an infrastructure failure."""
    require_device(device)
    console = Console(width=max(Console().width, 150))
    root = Path(tempfile.mkdtemp(prefix="cuda_agent_quickstart_"))
    try:
        tables = []
        if agent:
            tables.append(asyncio.run(_agent_session(device, root, console)))
        tables.append(asyncio.run(_sample_solutions(device, timed_calls, console)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for title, rows in tables:
        console.print(_table(title, rows))
    infra = [name for _, rows in tables for name, result in rows if result.is_infra_failure]
    if infra:
        console.print(f"[red]infrastructure failure[/red] in {', '.join(infra)}: the evaluator could not run "
                      "(see the note column); nothing was scored")
        return 3
    return 0

"""The README's first command: sample solutions evaluated end to end, with their rewards."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROBLEM = "diag_matmul"
PROBLEM_FILE = {"cpu": "diag_matmul", "cuda": "diag_matmul_cuda"}  # sizes that suit each device
CANDIDATES = {"cpu": ["cpu_fast", "cpu_slow", "cpu_cheat"], "cuda": ["cuda_fast", "cuda_slow", "cuda_cheat"]}


def _workspace(root: Path, device: str, name: str) -> Path:
    from cuda_agent.sandbox_pool.workspace import create_workspace

    ws = create_workspace((EXAMPLES / "problems" / f"{PROBLEM_FILE[device]}.py").read_text(), root / name, device)
    solution = EXAMPLES / "solutions" / PROBLEM / name
    (ws / "model_new.py").write_text((solution / "model_new.py").read_text())
    for kernel in (solution / "kernels").iterdir():
        shutil.copy(kernel, ws / "kernels" / kernel.name)
    return ws


async def _evaluate_all(device: str, timed_calls: int, root: Path, console: Console) -> Table:
    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, Evaluator, EvaluatorConfig
    from cuda_agent.sandbox_pool.workspace import read_candidate_files, read_problem

    table = Table(title=f"{PROBLEM}: sample solutions on {device}")
    for column in ("candidate", "status", "reward", "runtime us", "eager us", "compile us", "vs eager", "vs compile", "note"):
        table.add_column(column)
    async with Evaluator(EvaluatorConfig(device=device)) as evaluator:
        for name in CANDIDATES[device]:
            ws = _workspace(root, device, name)
            console.log(f"evaluating {name} (workspace {ws})")
            job = EvalJob(problem_src=read_problem(ws), files=read_candidate_files(ws), device=device,
                          options=EvalOptions(timed_calls=timed_calls), task_id=name)
            r = await evaluator.evaluate(job)
            f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
            table.add_row(name, r.status.value, f(r.reward), f(r.runtime_us), f(r.eager_us), f(r.torch_compile_us),
                          f(r.speedup_vs_eager), f(r.speedup_vs_compile), (r.error or "")[:70])
    return table


def run_quickstart(device: str, timed_calls: int) -> int:
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="cuda_agent_quickstart_"))
    try:
        table = asyncio.run(_evaluate_all(device, timed_calls, root, console))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    console.print(table)
    return 0

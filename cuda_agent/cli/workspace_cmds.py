"""`cuda-agent init`, `cuda-agent eval` and `cuda-agent quickstart`.

Light at import: torch and the harness load inside the commands; Ray, veRL and the Docker
SDK are never imported here.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from cuda_agent.cli.contract import json_stdout, progress, require_device
from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.harness.models import DEFAULT_TIMED_CALLS


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("eval")(eval_cmd)
    app.command("quickstart")(quickstart)


def init(
    problem: Path = typer.Argument(..., exists=True, dir_okay=False, help="Reference problem (KernelBench format: Model, get_inputs, get_init_inputs)."),
    directory: Path = typer.Argument(..., help="Workspace to create (must not exist or be empty)."),
    device: str = typer.Option("cuda", "--device", help="cuda: kernels/*.cu + *_binding.cpp; cpu: kernels/*.cpp."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty directory."),
) -> None:
    """Create a workspace for PROBLEM in DIRECTORY.

    Example: cuda-agent init examples/problems/diag_matmul.py /tmp/ws --device cpu
    """
    from cuda_agent.sandbox_pool.harness.problem import check_problem_source
    from cuda_agent.sandbox_pool.workspace import create_workspace

    source = problem.read_text(encoding="utf-8")
    check_problem_source(source, str(problem))
    path = create_workspace(source, directory, device, overwrite=overwrite)
    typer.echo(f"workspace created at {path} (device {device}); next: write kernels/ and model_new.py, then "
               f"`cuda-agent eval {path}`")


def eval_cmd(
    directory: Path = typer.Argument(..., exists=True, file_okay=False, help="Workspace created by `cuda-agent init`."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: the workspace's)."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object on stdout."),
    policy: str = typer.Option("paper", "--precision-policy", help="paper | matched | strict."),
    timed_calls: int = typer.Option(DEFAULT_TIMED_CALLS, "--timed-calls", help="Timed calls, each on fresh inputs."),
    no_profile: bool = typer.Option(False, "--no-profile", help="Verify only (no timing, no reward beyond 1)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the input draws (default: fresh)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Evaluate again even if this exact candidate, problem, "
                                  "device, settings and software stack were evaluated before."),
    refresh_baselines: bool = typer.Option(False, "--refresh-baselines", help="Measure the eager and torch.compile "
                                           "baselines again (replacing the cached ones); implies --no-cache."),
    pool: Optional[str] = typer.Option(None, "--pool", help="Evaluate in the pool at this address (a socket "
                                       "path or ray://NAME); default $CUDA_AGENT_POOL, else an embedded evaluator."),
    window_check: bool = typer.Option(
        False, "--window-check", help="Time the eager reference again in the candidate's window and refuse a reward "
        "timed under a load the cached baselines were not (infra_error 'machine loaded', exit 3); embedded "
        "evaluator only (a pool decides for itself: `cuda-agent pool serve --window-check`)."),
) -> None:
    """Evaluate the workspace's candidate: static check, compile, verify, profile, reward.

    The static check runs first (a rejected candidate is answered at once, nothing started);
    an unchanged candidate is answered from the result cache unless --no-cache.
    Exit code 0 whenever the evaluation ran (whatever the verdict), 2 for usage errors,
    3 for infrastructure failures. Example: cuda-agent eval /tmp/ws --json
    """
    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalStatus, PrecisionPolicy
    from cuda_agent.sandbox_pool.harness.problem import check_problem_source
    from cuda_agent.sandbox_pool.pool.config import ENV_ADDRESS
    from cuda_agent.sandbox_pool.workspace import read_candidate_files, read_problem, workspace_device

    if policy not in {p.value for p in PrecisionPolicy}:
        raise ConfigError(f"--precision-policy {policy!r} is not a policy; use paper, matched or strict")
    dev = device or workspace_device(directory)
    require_device(dev)
    options = EvalOptions(precision_policy=PrecisionPolicy(policy), timed_calls=timed_calls,
                          profile=not no_profile, seed=seed, refresh_baselines=refresh_baselines)
    job = EvalJob(problem_src=read_problem(directory), files=read_candidate_files(directory), device=dev,
                  options=options, task_id=str(directory))
    check_problem_source(job.problem_src, str(directory / "model.py"))
    address = pool or os.environ.get(ENV_ADDRESS) or None
    if window_check and address:
        raise ConfigError(f"--window-check applies to the embedded evaluator; the pool at {address} decides for itself "
                          "(serve it with `cuda-agent pool serve --window-check`)")
    with json_stdout(as_json) as stdout, progress(f"evaluating {directory} on {dev}"
                                                   + (f" in the pool at {address}" if address else "")):
        result = asyncio.run(_evaluate(job, address, use_cache=not (no_cache or refresh_baselines),
                                       window_check=window_check))
        if as_json:
            stdout.write(json.dumps(result.to_public_json()) + "\n")
    if not as_json:
        console = Console(width=max(Console().width, 120))
        console.print(result_table(result, title=str(directory)))
        if result.failed_stage_log():
            console.rule("log of the failed stage")
            console.print(result.failed_stage_log(), markup=False, highlight=False)
    if result.status is EvalStatus.INFRA_ERROR:
        raise typer.Exit(3)


async def _evaluate(job, address: str | None, *, use_cache: bool, window_check: bool = False):  # noqa: ANN001, ANN202
    """In the pool at `address`, else a one-shot embedded evaluator (with its result cache; with the window
    check if `window_check`). Harness types load lazily."""
    from cuda_agent.sandbox_pool.harness.problem import load_problem

    if address:
        from cuda_agent.sandbox_pool.pool import connect_pool

        load_problem(job.problem_src)  # a reference that does not run is the user's to fix (exit 2), not infra
        async with connect_pool(address) as pool:
            return await pool.evaluate(job)
    from cuda_agent.sandbox_pool.harness.oneshot import evaluate_oneshot

    # The one-shot path loads the reference (same exit 2) only after the static check and the
    # result cache, which answer without importing torch.
    config = None
    if window_check:  # EvaluatorConfig imports torch: only when asked for
        from cuda_agent.sandbox_pool.harness.evaluator import EvaluatorConfig

        config = EvaluatorConfig(device=job.device, window_check=True)
    return await evaluate_oneshot(job, config=config, use_cache=use_cache,
                                  before_evaluation=lambda: load_problem(job.problem_src))


def result_table(result, title: str) -> Table:  # noqa: ANN001 - EvalResult, imported lazily
    table = Table(title=title, show_header=False)
    fmt = lambda v: "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))  # noqa: E731
    rows = [
        ("status", result.status.value), ("reward", fmt(result.reward)), ("compiled", fmt(result.compiled)),
        ("correct", fmt(result.correct)), ("runtime (us)", fmt(result.runtime_us)), ("eager (us)", fmt(result.eager_us)),
        ("torch.compile (us)", fmt(result.torch_compile_us)), ("speed-up vs eager", fmt(result.speedup_vs_eager)),
        ("speed-up vs compile", fmt(result.speedup_vs_compile)), ("precision policy", result.precision_policy.value),
    ]
    if result.error:
        rows.append(("error", result.error[:300]))
    if result.warnings:
        rows.append(("warnings", "; ".join(result.warnings)[:500]))
    for key, value in rows:
        table.add_row(key, value)
    return table


def quickstart(
    device: str = typer.Option("cpu", "--device", help="cpu (any machine) or cuda (a GPU node)."),
    timed_calls: int = typer.Option(DEFAULT_TIMED_CALLS, "--timed-calls", help="Timed calls per candidate."),
    agent: bool = typer.Option(True, "--agent/--no-agent", help="Run the scripted agent session first."),
) -> None:
    """Run the system end to end on the embedded default (CPU, local sandbox, embedded evaluator).

    A scripted agent session (a stand-in for the LLM drives the real tools in the local
    sandbox: read, profile, write a kernel, compile, verify, profile; then the trusted
    evaluator scores the workspace), then the example's sample solutions (fast, slow,
    cheating) with their rewards. Example: cuda-agent quickstart --device cpu
    """
    from cuda_agent.cli.quickstart import run_quickstart

    raise typer.Exit(run_quickstart(device, timed_calls, agent))

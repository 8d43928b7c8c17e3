"""``cuda-agent run`` and ``cuda-agent report`` (errors follow cuda_agent.cli.contract).

Light at import: the runner, veRL, torch and matplotlib load inside the commands.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from cuda_agent.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("report")(report)
    app.command("baselines")(baselines)


def run(
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name as the endpoint serves it."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="Environment variable holding the API key."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="Tasks: one of our parquet datasets (docs/verl.md)."),
    problems: Optional[Path] = typer.Option(None, "--problems", help="Tasks: a folder of KernelBench-format *.py problems."),
    kernelbench: Optional[Path] = typer.Option(None, "--kernelbench", help="Tasks: a KernelBench checkout (git clone)."),
    level: Optional[str] = typer.Option(None, "--level", help="KernelBench levels, e.g. 1,2,3 (default 1,2,3)."),
    tasks_re: Optional[str] = typer.Option(None, "--tasks", help="Only task ids matching this regular expression."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="At most this many tasks."),
    solutions: Optional[Path] = typer.Option(None, "--solutions", help="Re-score DIR/<task_id>/model_new.py + kernels/ (no model)."),
    demonstrate: bool = typer.Option(
        False, "--demonstrate", help="With --solutions: write each solution through the agent's tools (a scripted "
        "agent; trajectory records marked as demonstrations, for rejection fine-tuning) instead of re-scoring it; "
        "tasks without a solution folder are skipped."),
    mode: str = typer.Option("agentic", "--mode", help="agentic | single-turn."),
    device: Optional[str] = typer.Option(None, "--device", help="cuda | cpu (default: cuda; a dataset row's own)."),
    samples: int = typer.Option(1, "--samples", min=1, help="Samples per task (pass@k when > 1)."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Trajectories in flight at once."),
    out: Path = typer.Option(Path("results.jsonl"), "--out", help="Results JSONL (appended; a re-run resumes)."),
    records: Optional[Path] = typer.Option(None, "--records", help="Trajectory records folder (default OUT stem + .trajectories)."),
    no_records: bool = typer.Option(False, "--no-records", help="Do not write trajectory records."),
    max_turns: int = typer.Option(200, "--max-turns", min=1, help="Assistant turns per trajectory (paper evaluation: 200)."),
    max_total_tokens: int = typer.Option(131072, "--max-total-tokens", min=16, help="Context budget per trajectory."),
    max_observation_chars: int = typer.Option(16000, "--max-observation-chars", min=64, help="Longer observations are cut."),
    task_timeout: Optional[float] = typer.Option(None, "--task-timeout", help="Wall seconds per trajectory; then its workspace is evaluated."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Sampling temperature (default: the endpoint's)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Completion tokens per request."),
    request_timeout: float = typer.Option(600.0, "--request-timeout", help="Seconds per request."),
    retries: int = typer.Option(4, "--retries", min=0, help="Retries of a failed request (backoff doubles)."),
    backoff: float = typer.Option(2.0, "--backoff", min=0.0, help="First retry delay in seconds."),
    sandbox: str = typer.Option("local", "--sandbox", help="local | docker terminal sandbox."),
    workspace_root: Optional[Path] = typer.Option(None, "--workspace-root", help="Where workspaces are created."),
    precision_policy: Optional[str] = typer.Option(None, "--precision-policy", help="paper | matched | strict."),
    pool: Optional[str] = typer.Option(None, "--pool", help="Evaluation pool address (default $CUDA_AGENT_POOL, else an embedded pool on the visible devices)."),
    eval_timeout: float = typer.Option(1800.0, "--eval-timeout", min=1.0, help="Seconds per final evaluation, queueing included (then infra_error)."),
    as_json: bool = typer.Option(False, "--json", help="Print the run summary as one JSON object on stdout."),
) -> None:
    """Run the training agent on tasks against an OpenAI-compatible endpoint; write results and trajectories.

    Example: cuda-agent run --kernelbench KernelBench --level 1 --base-url http://localhost:8000/v1 --model my-ckpt --out runs/ckpt.jsonl
    Demonstrations: cuda-agent run --dataset tasks.parquet --solutions best/ --demonstrate --records traj/ --out demos.jsonl
    """
    from cuda_agent.evaluation.client import EndpointConfig, check_endpoint

    if mode not in ("agentic", "single-turn"):
        raise ConfigError(f"--mode {mode!r}: use agentic or single-turn")
    if sandbox not in ("local", "docker"):
        raise ConfigError(f"--sandbox {sandbox!r}: use local or docker")
    if device is not None and device not in ("cpu", "cuda"):
        raise ConfigError(f"--device {device!r}: use cpu or cuda")
    endpoint = None
    if solutions is None:
        if not base_url or not model:
            raise ConfigError("--base-url and --model are required (or --solutions DIR to re-score existing solutions)")
        endpoint = EndpointConfig(base_url=base_url, model=model, api_key_env=api_key_env, timeout_s=request_timeout,
                                  retries=retries, backoff_s=backoff, temperature=temperature, max_tokens=max_tokens)
    elif not solutions.is_dir():
        raise ConfigError(f"--solutions {solutions} is not a folder; it holds <task_id>/model_new.py + kernels/")
    if demonstrate and solutions is None:
        raise ConfigError("--demonstrate writes known solutions through the tools: give them with --solutions DIR")
    if endpoint is not None:
        # before anything heavy loads: a wrong URL or model fails fast; a broken model list is only a warning
        for warning in asyncio.run(check_endpoint(endpoint)):
            typer.echo(f"warning: {warning}", err=True)
    from cuda_agent.evaluation.runner import RunConfig, Runner
    from cuda_agent.recipe.loop_config import CudaAgentLoopConfig, LoopLimits, SandboxSpec
    from cuda_agent.reward_fns.options import RewardOptions

    tasks = load_tasks(dataset, problems, kernelbench, level, device, tasks_re, limit)
    reward = RewardOptions(precision_policy=precision_policy, eval_timeout_s=eval_timeout, pool_address=pool)
    config = RunConfig(
        mode=("demonstrations" if demonstrate else "solutions") if solutions is not None else mode, samples=samples,
        concurrency=concurrency, results=out,
        records=None if no_records or (solutions is not None and not demonstrate)
        else (records or out.with_name(out.stem + ".trajectories")),
        loop=CudaAgentLoopConfig(
            limits=LoopLimits(max_turns=max_turns, max_total_tokens=max_total_tokens,
                              max_observation_chars=max_observation_chars),
            sandbox=SandboxSpec(type=sandbox), workspace_root=str(workspace_root) if workspace_root else None),
        reward=reward, task_timeout_s=task_timeout, solutions=solutions,
    )
    if config.mode == "solutions" and samples != 1:
        raise ConfigError("--samples applies to model runs; re-scoring solutions has one sample per task")
    runner = Runner(config, endpoint, preflight=False)  # checked above
    if demonstrate:
        missing = len(tasks) - len(runner.runnable(tasks))
        if missing == len(tasks):
            raise ConfigError(f"no task has a solution folder under {solutions} (expected {solutions}/<task_id>/ with "
                              "model_new.py and kernels/); task ids: " + ", ".join(t.task_id for t in tasks[:5]))
        if missing:
            typer.echo(f"{missing} of {len(tasks)} task(s) have no solution folder under {solutions}: not demonstrated",
                       err=True)
    summary = asyncio.run(_run_with_progress(runner, tasks))
    line = (f"{summary.done} run, {summary.skipped} already finished; pass {summary.passed}, faster than compile "
            f"{summary.faster_than_compile}, excluded (endpoint/infra) {summary.excluded}; results: {out}")
    if as_json:
        sys.stdout.write(json.dumps({**summary.model_dump(), "results": str(out)}) + "\n")
    else:
        typer.echo(line, err=True)


def load_tasks(dataset: Optional[Path], problems: Optional[Path], kernelbench: Optional[Path], level: Optional[str],
               device: Optional[str], pattern: Optional[str], limit: Optional[int]):  # noqa: ANN201 - list[Task]
    from cuda_agent.evaluation import tasks as sources

    given = [flag for flag, value in (("--dataset", dataset), ("--problems", problems), ("--kernelbench", kernelbench))
             if value is not None]
    if len(given) != 1:
        raise ConfigError("name exactly one task source: --dataset FILE.parquet, --problems DIR or --kernelbench DIR"
                          + (f" (got {', '.join(given)})" if given else ""))
    levels = sources.parse_levels(level)
    if kernelbench is not None:
        found = sources.kernelbench_tasks(kernelbench, levels, device or "cuda")  # type: ignore[arg-type]
    elif problems is not None:
        found = sources.folder_tasks(problems, device or "cuda", levels[0] if levels and len(levels) == 1 else None)  # type: ignore[arg-type]
    else:
        assert dataset is not None
        found = sources.dataset_tasks(dataset, device)  # type: ignore[arg-type]
        if levels:
            found = [task for task in found if task.level in levels]
    return sources.select(found, pattern, limit)


async def _run_with_progress(runner, tasks):  # noqa: ANN001, ANN202
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    pending = len(runner.pending(tasks))
    counts = {"pass": 0, "compile": 0, "excluded": 0}
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("pass {task.fields[pass]} · faster than compile {task.fields[compile]} · "
                             "excluded {task.fields[excluded]}"),
                  console=Console(stderr=True), transient=False) as progress:
        bar = progress.add_task("samples", total=pending, **counts)

        def on_result(result) -> None:  # noqa: ANN001
            counts["pass"] += int(result.correct)
            counts["compile"] += int(result.correct and (result.speedup_vs_compile or 0) > 1)
            counts["excluded"] += int(result.excluded)
            progress.update(bar, advance=1, **counts)

        return await runner.run(tasks, on_result)


def report(
    results: list[Path] = typer.Argument(..., help="Results JSONL file(s) of `cuda-agent run`; several = side by side."),
    out: Path = typer.Option(Path("report"), "--out", help="Folder for report.md, report.json, *.png (and report.html)."),
    html: bool = typer.Option(False, "--html", help="Also write one self-contained report.html with drill-downs."),
    trajectories: Optional[list[Path]] = typer.Option(None, "--trajectories", help="Records folder per results file (default: RESULTS stem + .trajectories)."),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as one JSON object on stdout."),
) -> None:
    """Metrics per level (pass rate, faster than eager / compile, geomean speed-ups, fast_p, pass@k) and plots.

    Example: cuda-agent report runs/a.jsonl runs/b.jsonl --out report --html
    """
    from cuda_agent.evaluation.report import to_markdown, write_report

    if trajectories and len(trajectories) != len(results):
        raise ConfigError(f"--trajectories given {len(trajectories)} time(s) for {len(results)} results file(s); "
                          "give one per results file, in the same order")
    report_, written = write_report(results, out, html=html, trajectories=trajectories)
    if as_json:
        sys.stdout.write(json.dumps(report_.model_dump(mode="json")) + "\n")
    else:
        sys.stdout.write(to_markdown(report_))
        typer.echo("written: " + ", ".join(str(path) for path in written.values()), err=True)


def baselines(
    kernelbench: Optional[Path] = typer.Option(None, "--kernelbench", help="Tasks: a KernelBench checkout."),
    problems: Optional[Path] = typer.Option(None, "--problems", help="Tasks: a folder of problem files."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="Tasks: one of our parquet datasets."),
    level: Optional[str] = typer.Option(None, "--level", help="KernelBench levels, e.g. 1,2,3."),
    tasks_re: Optional[str] = typer.Option(None, "--tasks", help="Only task ids matching this regular expression."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="At most this many tasks."),
    device: str = typer.Option("cuda", "--device", help="cuda | cpu."),
    device_index: int = typer.Option(0, "--device-index", min=0, help="GPU index."),
    timed_calls: int = typer.Option(30, "--timed-calls", min=3, help="Timed calls per baseline (the evaluator's default)."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Parallel torch.compile warm-up children per batch (1: none); "
                             "timing stays one task at a time, never during a warm-up."),
    compile_cache: Optional[Path] = typer.Option(None, "--compile-cache", help="Shared inductor/triton cache of the "
                                                 "baseline children (default: CACHE/reference_compile)."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Seconds; then no new task starts and a warm-up in flight stops."),
    out: Path = typer.Option(Path("baselines.jsonl"), "--out", help="One line per task (appended; resumable)."),
    as_json: bool = typer.Option(False, "--json", help="Print a summary JSON object on stdout."),
) -> None:
    """Measure the eager and torch.compile baselines of tasks once on this machine (cached like the evaluator's).

    Example: cuda-agent baselines --kernelbench KernelBench --level 1,2,3 --jobs 12 --budget 540 --out runs/baselines.jsonl
    """
    from cuda_agent.cli.contract import require_device

    require_device(device)
    from cuda_agent.evaluation.tasks import interleave_levels

    tasks = interleave_levels(load_tasks(dataset, problems, kernelbench, level, device, tasks_re, limit))
    summary = asyncio.run(_baselines_with_progress(tasks, out, device=device, device_index=device_index,
                                                   timed_calls=timed_calls, budget_s=budget, jobs=jobs,
                                                   compile_cache=compile_cache))
    result = {**summary.model_dump(), "wall_s": round(summary.wall_s, 1), "warm_s": round(summary.warm_s, 1),
              "timed_s": round(summary.timed_s, 1), "out": str(out)}
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        typer.echo(f"baselines: {result}", err=True)
    if summary.budget_spent:
        typer.echo(f"baselines: budget spent; {summary.remaining} task(s) left: run the same command again to resume",
                   err=True)


async def _baselines_with_progress(tasks, out: Path, **kwargs):  # noqa: ANN001, ANN003, ANN202 - PassSummary
    from cuda_agent.evaluation.baselines import measure_baselines

    state = {"total": 0, "measured": 0}

    def describe(line) -> str:  # noqa: ANN001
        eager = "-" if line.eager_us is None else f"{line.eager_us:.1f}"
        compiled = "-" if line.torch_compile_us is None else f"{line.torch_compile_us:.1f}"
        notes = ", ".join(note for note, on in (("cached", line.cached), ("warmed", line.warmed)) if on)
        return (f"[{state['measured']}/{state['total']}] {line.task_id}: eager {eager} us, compile {compiled} us "
                f"({line.wall_s:.1f} s{', ' + notes if notes else ''}){' ' + line.error[:120] if line.error else ''}")

    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:  # a bare GPU node: plain lines only
        def plain(progress_state) -> None:  # noqa: ANN001
            state.update(total=progress_state.total, measured=progress_state.measured)

        return await measure_baselines(tasks, out, on_line=lambda line: typer.echo(describe(line), err=True),
                                       on_progress=plain, **kwargs)

    with Progress(TextColumn("[bold]baselines {task.fields[phase]}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(),
                  TextColumn("cached {task.fields[cached]} · failed {task.fields[failed]} · warmed "
                             "{task.fields[warmed]} (failed {task.fields[warm_failed]})"),
                  console=Console(stderr=True), transient=False) as progress:
        bar = progress.add_task("baselines", total=None, phase="start", cached=0, failed=0, warmed=0, warm_failed=0)

        def on_progress(progress_state) -> None:  # noqa: ANN001
            state.update(total=progress_state.total, measured=progress_state.measured)
            progress.update(bar, total=progress_state.total, completed=progress_state.measured,
                            phase=progress_state.phase, cached=progress_state.cached, failed=progress_state.failed,
                            warmed=progress_state.warmed, warm_failed=progress_state.warm_failed)

        return await measure_baselines(tasks, out, on_line=lambda line: progress.console.print(describe(line), highlight=False),
                                       on_progress=on_progress, **kwargs)

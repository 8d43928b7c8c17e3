"""`cuda-agent data`: crawl, compose, filter, decontam, export, import and the full pipeline.

Light at import (mounted into the main CLI): torch, transformers, pandas and ray load inside
the commands. Exit codes: 0 success, 2 usage / configuration errors, 3 infrastructure failures.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import List, Optional

import typer

from cuda_agent.cli.contract import ContractGroup
from cuda_agent.errors import CudaAgentError

app = typer.Typer(
    help="Synthesise training tasks: crawl operators, compose fused tasks, filter by execution, "
    "decontaminate against KernelBench, export veRL parquet.",
    no_args_is_help=True,
    cls=ContractGroup,
)


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log INFO messages.")) -> None:
    from rich.logging import RichHandler

    from cuda_agent.data_gen.cli_tables import console

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s",
                        handlers=[RichHandler(console=console, show_path=False)], force=True)


_errors = contextlib.nullcontext
"""Errors become exit codes and one line on stderr in one place: the CLI contract (ContractGroup)."""


def _echo_json(model: object) -> None:
    typer.echo(model.model_dump_json(indent=2))  # type: ignore[attr-defined]


@app.command()
def crawl(
    out: Path = typer.Option(Path("data/seeds.jsonl"), "--out", "-o", help="Seed tasks JSONL (appended, resumable)."),
    size: str = typer.Option("small", "--size", help="Size preset: tiny, small (CPU, default), medium or large (GPU)."),
    library: List[str] = typer.Option(["torch", "transformers"], "--library", "-l", help="torch and/or transformers."),
    check: bool = typer.Option(True, "--check/--no-check", help="Run every seed once on the CPU (tiny sizes)."),
) -> None:
    """Write one KernelBench-format seed task per torch / transformers operator.

    Example: cuda-agent data crawl --out data/seeds.jsonl --size large
    """
    from cuda_agent.data_gen.cli_tables import console, progress_bar
    from cuda_agent.data_gen.crawl import crawl as run

    with _errors(), progress_bar("crawl") as progress:
        report = run(out, libraries=library, size=size, check=check, progress=progress)
    console.print(f"seeds per library: {report.by_library}; {report.written} written, "
                  f"{report.skipped_existing} already present, {len(report.failures)} dropped -> {out}")
    for failure in report.failures:
        console.print(f"  dropped {failure.op}: {failure.reason.splitlines()[0][:160]}")
    with _errors():
        _require(sum(report.by_library.values()), "crawl", "no operator built a seed (see the dropped operators above)")


@app.command()
def compose(
    out: Path = typer.Option(Path("data/composed.jsonl"), "--out", "-o", help="Fused tasks JSONL (resumable)."),
    count: int = typer.Option(150, "--count", "-n", help="Distinct fused tasks wanted in OUT."),
    seeds: Optional[Path] = typer.Option(None, "--seeds", help="Crawled seeds: restricts the operators used."),
    composer: str = typer.Option("programmatic", "--composer", help="programmatic (offline) or llm."),
    size: str = typer.Option("small", "--size", help="Size preset: tiny, small (CPU, default), medium or large (GPU)."),
    seed: int = typer.Option(0, "--seed", help="Sampler seed (same seed, same tasks)."),
    min_ops: int = typer.Option(2, "--min-ops", help="Fewest operators per task."),
    max_ops: int = typer.Option(5, "--max-ops", help="Most operators per task (<= 5)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."),
    model: Optional[str] = typer.Option(None, "--model", help="Model served by the endpoint."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="Variable holding the API key."),
    temperature: float = typer.Option(0.7, "--temperature", help="LLM sampling temperature."),
    concurrency: int = typer.Option(4, "--concurrency", help="LLM requests in flight."),
    device: str = typer.Option("cuda", "--device", help="Target device named in the LLM prompt."),
) -> None:
    """Stack up to 5 torch operators into fused tasks (programmatic, or through an LLM endpoint).

    Example: cuda-agent data compose --count 500 --size large --seeds data/seeds.jsonl
    """
    from cuda_agent.data_gen.cli_tables import console, progress_bar
    from cuda_agent.data_gen.compose import EndpointConfig
    from cuda_agent.data_gen.compose import compose as run
    from cuda_agent.data_gen.filter.models import DEFAULT_WINDOWS_MS

    with _errors():
        endpoint = None
        if composer == "llm":
            if not base_url or not model:
                raise _usage("--composer llm needs --base-url and --model")
            endpoint = EndpointConfig(base_url=base_url, model=model, api_key_env=api_key_env,
                                      temperature=temperature, concurrency=concurrency)
        elif composer != "programmatic":
            raise _usage(f"unknown composer {composer!r}: programmatic or llm")
        with progress_bar("compose") as progress:
            report = run(out, count=count, composer=composer, seeds_path=seeds, size=size, seed=seed,  # type: ignore[arg-type]
                         min_ops=min_ops, max_ops=max_ops, endpoint=endpoint, device=_device(device),
                         window_ms=DEFAULT_WINDOWS_MS[device], progress=progress)
    console.print(f"{report.written} tasks written ({report.existing} already present, {report.resumed} regenerated "
                  f"on resume), {report.duplicates} duplicates and {report.failed_attempts} failed attempts skipped"
                  + (f" {report.failed_by_reason}" if report.failed_by_reason else "") + f" -> {out}")
    with _errors():
        _require(report.existing + report.written, "compose", "no valid task was composed (see the failed attempts)")


def _require(count: int, stage: str, why: str) -> None:
    from cuda_agent.data_gen.stage import require

    require(count, stage, why)


def _check_tasks(path: Path) -> None:
    """A usage error (exit 2) for an input JSONL that is empty or has a bad line."""
    from cuda_agent.data_gen.models import Task
    from cuda_agent.data_gen.store import JsonlStore

    JsonlStore(path, Task).check_input()


def _usage(message: str) -> CudaAgentError:
    from cuda_agent.errors import ConfigError

    return ConfigError(message)


def _device(device: str) -> str:
    if device not in ("cpu", "cuda"):
        raise _usage(f"--device must be cpu or cuda, got {device!r}")
    return device


def _filter_config(device: str, min_ms: Optional[float], max_ms: Optional[float], workers: Optional[int],
                   gpus: Optional[str], timeout: Optional[float], compile_: bool, compile_backend: str,
                   seed: int, atol: float, rtol: float) -> object:
    from cuda_agent.data_gen.filter.models import FilterConfig

    values = dict(device=_device(device), min_ms=min_ms, max_ms=max_ms, workers=workers, compile=compile_,
                  compile_backend=compile_backend, seed=seed, atol=atol, rtol=rtol,
                  devices=[int(g) for g in gpus.split(",")] if gpus else None)
    if timeout is not None:
        values["timeout_s"] = timeout
    try:
        return FilterConfig(**values)
    except ValueError as exc:
        raise _usage(str(exc)) from None


@app.command("filter")
def filter_cmd(
    tasks: Path = typer.Argument(..., exists=True, dir_okay=False, help="Tasks JSONL (seeds or composed)."),
    out: Path = typer.Option(Path("data/filter"), "--out", "-o", help="Output folder (resumable)."),
    device: str = typer.Option("cuda", "--device", help="cuda (every visible GPU) or cpu."),
    min_ms: Optional[float] = typer.Option(None, "--min-ms", help="Eager-time lower bound (default 1 on cuda, 0.01 on cpu)."),
    max_ms: Optional[float] = typer.Option(None, "--max-ms", help="Eager-time upper bound (default 100 on cuda, 2000 on cpu)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Task processes per GPU (cuda) or in total (cpu)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices, e.g. 0,1 (default: all)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Per-task limit, s (default 300)."),
    compile_: bool = typer.Option(True, "--compile/--no-compile", help="Check that torch.compile runs and matches."),
    compile_backend: str = typer.Option("inductor", "--compile-backend", help="inductor, or eager / aot_eager for quick CPU runs."),
    atol: float = typer.Option(1e-2, "--atol", help="Tolerance of the hackability and compile checks."),
    rtol: float = typer.Option(1e-2, "--rtol", help="Relative tolerance of those checks."),
    seed: int = typer.Option(0, "--seed", help="Seed of parameters and input draws."),
    backend: str = typer.Option("local", "--backend", help="local (this machine) or ray (a cluster)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address (default: start or join locally)."),
    ray_gpus: float = typer.Option(1.0, "--ray-gpus-per-task", help="GPUs each Ray task holds (0.25: four compile per GPU)."),
    recheck: bool = typer.Option(False, "--recheck", help="Run the filter twice on kept tasks; report the fraction kept again."),
) -> None:
    """Keep tasks that run eager and compiled, are deterministic, not hackable and timed in the window.

    Example: cuda-agent data filter data/composed.jsonl --out data/filter --device cuda --recheck
    """
    from cuda_agent.data_gen.cli_tables import print_filter_report, progress_bar
    from cuda_agent.data_gen.filter import filter_tasks

    from cuda_agent.data_gen.cli_tables import bar_callback, new_progress

    _check_tasks(tasks)
    with _errors():
        config = _filter_config(device, min_ms, max_ms, workers, gpus, timeout, compile_, compile_backend, seed,
                                atol, rtol)
        if backend not in ("local", "ray"):
            raise _usage(f"--backend must be local or ray, got {backend!r}")
        with new_progress() as bars:
            report = filter_tasks(tasks, out, config, backend=backend, ray_address=ray_address,  # type: ignore[arg-type]
                                  ray_gpus_per_task=ray_gpus, recheck=recheck, progress=bar_callback(bars, "filter"),
                                  recheck_progress=bar_callback(bars, "recheck"))
    print_filter_report(report)
    with _errors():
        _require(report.kept, "filter", f"0 of {report.total} tasks kept ({report.by_criterion}); see {out / 'report.json'}")


@app.command()
def decontam(
    tasks: Path = typer.Argument(..., exists=True, dir_okay=False, help="Tasks JSONL (usually filter/kept.jsonl)."),
    kernelbench: Path = typer.Option(..., "--kernelbench", exists=True, help="KernelBench checkout (level*/ folders) or dataset file."),
    out: Path = typer.Option(Path("data/decontam"), "--out", "-o", help="Output folder (resumable)."),
    threshold: float = typer.Option(0.9, "--threshold", help="Drop tasks whose AST similarity exceeds this."),
) -> None:
    """Drop tasks too similar to a KernelBench problem (normalised-AST similarity > threshold).

    Example: cuda-agent data decontam data/filter/kept.jsonl --kernelbench ~/KernelBench/KernelBench
    """
    from cuda_agent.data_gen.cli_tables import print_decontam_report, progress_bar
    from cuda_agent.data_gen.decontam import decontaminate

    _check_tasks(tasks)
    with _errors(), progress_bar("decontam") as progress:
        report = decontaminate(tasks, out, kernelbench, threshold=threshold, progress=progress)
    print_decontam_report(report)
    with _errors():
        _require(report.kept, "decontam", f"every task scores above {threshold} against {kernelbench}")


@app.command("export")
def export_cmd(
    tasks: Path = typer.Argument(..., exists=True, dir_okay=False, help="Tasks JSONL (usually decontam/clean.jsonl)."),
    out: Path = typer.Option(Path("data/export"), "--out", "-o", help="Output folder (rewritten)."),
    device: str = typer.Option("cuda", "--device", help="Device written into extra_info and the prompts."),
    data_source: str = typer.Option("cuda_agent/ops", "--data-source", help="data_source column."),
    val_fraction: float = typer.Option(0.0, "--val-fraction", help="Share of tasks in the *_val.parquet split."),
    fmt: List[str] = typer.Option(["verl", "sft", "kernelbench"], "--format", "-f", help="verl, sft, kernelbench."),
    single_turn_agent: str = typer.Option("cuda_agent_single_turn", "--single-turn-agent",
                                          help="agent_name of single-turn rows (veRL's plain loop: single_turn_agent)."),
    solutions: Optional[Path] = typer.Option(None, "--solutions", help="Folder of <task id>/model_new.py (+ kernels/) for the SFT parquet."),
) -> None:
    """Write veRL parquet (single-turn, agentic), an SFT parquet and KernelBench-format folders.

    Example: cuda-agent data export data/decontam/clean.jsonl --out data/export --val-fraction 0.05
    """
    from cuda_agent.data_gen.cli_tables import console, progress_bar
    from cuda_agent.data_gen.export import export

    _check_tasks(tasks)
    with _errors(), progress_bar("export") as progress:
        report = export(tasks, out, device=_device(device), data_source=data_source,  # type: ignore[arg-type]
                        val_fraction=val_fraction, formats=fmt, single_turn_agent=single_turn_agent,
                        solutions_dir=solutions, progress=progress)
    console.print(f"{report.tasks} tasks: {report.train_rows} train / {report.val_rows} val rows, "
                  f"{report.sft_rows} SFT rows, {report.kernelbench_files} KernelBench files -> {out}")
    with _errors():
        _require(report.tasks, "export", f"{tasks} holds no task")


@app.command("import")
def import_cmd(
    path: Path = typer.Argument(..., exists=True, help="CUDA-Agent-Ops-6K (parquet / jsonl / json / folder of .py)."),
    out: Path = typer.Option(Path("data/imported.jsonl"), "--out", "-o", help="Tasks JSONL (appended, resumable)."),
    prefix: str = typer.Option("ops6k", "--prefix", help="Prefix of the imported task ids."),
) -> None:
    """Import an existing task collection (e.g. the released CUDA-Agent-Ops-6K) as pipeline tasks.

    Example: cuda-agent data import ~/CUDA-Agent-Ops-6K/data --out data/ops6k.jsonl
    """
    from cuda_agent.data_gen.cli_tables import console, progress_bar
    from cuda_agent.data_gen.importer import import_tasks

    with _errors(), progress_bar("import") as progress:
        report = import_tasks(path, out, prefix=prefix, progress=progress)
    console.print(f"{report.imported} imported of {report.read} read ({report.invalid} invalid, "
                  f"{report.duplicates} duplicates, {report.skipped_existing} already present) -> {out}")


app.command("import-ops6k", hidden=True)(import_cmd)


@app.command()
def pipeline(
    out: Path = typer.Option(Path("data"), "--out", "-o", help="Output folder (every stage resumable)."),
    device: str = typer.Option("cuda", "--device", help="cuda or cpu."),
    count: int = typer.Option(150, "--count", "-n", help="Fused tasks to compose and filter."),
    include_seeds: int = typer.Option(0, "--include-seeds", help="Seed tasks filtered too (-1 = all)."),
    size: Optional[str] = typer.Option(None, "--size", help="Size preset (default large on cuda, tiny on cpu)."),
    seed: int = typer.Option(0, "--seed", help="Composer seed."),
    composer: str = typer.Option("programmatic", "--composer", help="programmatic or llm."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="LLM endpoint (composer llm)."),
    model: Optional[str] = typer.Option(None, "--model", help="LLM model name (composer llm)."),
    min_ms: Optional[float] = typer.Option(None, "--min-ms", help="Eager-time lower bound."),
    max_ms: Optional[float] = typer.Option(None, "--max-ms", help="Eager-time upper bound."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Filter processes per GPU (cuda) or in total (cpu)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Per-task filter limit, s."),
    compile_backend: str = typer.Option("inductor", "--compile-backend", help="torch.compile backend of the filter."),
    backend: str = typer.Option("local", "--backend", help="local or ray."),
    recheck: bool = typer.Option(False, "--recheck", help="Second filter run on kept tasks (stability)."),
    kernelbench: Optional[Path] = typer.Option(None, "--kernelbench", help="KernelBench checkout or dataset file for decontam (required unless --no-decontam)."),
    no_decontam: bool = typer.Option(False, "--no-decontam", help="Export without decontamination (the reports record it)."),
    threshold: float = typer.Option(0.9, "--threshold", help="Decontam: drop tasks whose AST similarity exceeds this."),
    val_fraction: float = typer.Option(0.0, "--val-fraction", help="Export: share of tasks in the *_val.parquet split."),
    redraw_rounds: int = typer.Option(1, "--redraw-rounds", help="Re-draw tasks dropped as dead_operator / dead_input this many times."),
) -> None:
    """Run crawl -> compose -> filter -> decontam -> export into OUT, and write the dataset report.

    Example: cuda-agent data pipeline --device cuda --count 300 --out runs/h200 --kernelbench ~/KernelBench/KernelBench
    """
    from cuda_agent.data_gen.cli_tables import console, new_progress, print_decontam_report, print_filter_report
    from cuda_agent.data_gen.cli_tables import bar_callback
    from cuda_agent.data_gen.compose import EndpointConfig
    from cuda_agent.data_gen.pipeline import PipelineConfig, run_pipeline

    with _errors():
        filter_config = _filter_config(device, min_ms, max_ms, workers, None, timeout, True, compile_backend, 0,
                                       1e-2, 1e-2)
        if kernelbench is None and not no_decontam:
            raise _usage("the pipeline exports only decontaminated tasks: pass --kernelbench PATH (a KernelBench "
                         "checkout or dataset file), or --no-decontam to export without decontamination")
        endpoint = EndpointConfig(base_url=base_url, model=model) if base_url and model else None
        config = PipelineConfig(out=out, device=device, count=count, include_seeds=include_seeds, size=size,  # type: ignore[arg-type]
                                seed=seed, composer=composer, endpoint=endpoint, filter=filter_config,  # type: ignore[arg-type]
                                backend=backend, recheck=recheck, kernelbench=kernelbench,  # type: ignore[arg-type]
                                skip_decontam=no_decontam, threshold=threshold, val_fraction=val_fraction,
                                redraw_rounds=redraw_rounds)
        with new_progress() as progress:
            report = run_pipeline(config, lambda stage: bar_callback(progress, stage))
    print_filter_report(report.filter)
    if report.decontam is not None:
        print_decontam_report(report.decontam)
    console.print(f"exported {report.export.tasks} tasks ({report.export.train_rows} train / {report.export.val_rows} "
                  f"val) to {out / 'export'}" + ("" if report.decontaminated else " [yellow]without decontamination[/]")
                  + f"; reports {out / 'pipeline_report.json'}, {out / 'dataset_report.md'} ({report.wall_s:.0f} s)")

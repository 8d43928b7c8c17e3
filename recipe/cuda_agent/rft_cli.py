"""`cuda-agent rft`: stage 2's data, the trajectories that RFT trains on (recipe/cuda_agent/rft.py).

Light at import (mounted into the main CLI): pyarrow and jsonschema load inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import typer

app = typer.Typer(help="Rejection fine-tuning (stage 2): filter collected trajectories into SFT data.",
                  no_args_is_help=True)


@app.command("filter")
def filter_cmd(
    trajectories: List[Path] = typer.Argument(..., help="Trajectory parquet files or folders of shards "
                                              "(the agent loop's trajectory_dir, the runner's output)."),
    out: Path = typer.Option(..., "--out", "-o", help="The SFT parquet file to write (veRL MultiTurnSFTDataset)."),
    min_reward: float = typer.Option(0.0, help="Keep rewards strictly above this."),
    max_malformed_calls: int = typer.Option(0, min=0, help="Unparsable calls / non-object arguments allowed."),
    max_unknown_tool_calls: int = typer.Option(0, min=0, help="Calls of unknown tools allowed."),
    max_schema_errors: int = typer.Option(0, min=0, help="Calls failing the tool's JSON schema allowed."),
    max_repeated_calls: int = typer.Option(3, min=1, help="Longest run of identical consecutive calls allowed."),
    max_idle_turns: int = typer.Option(20, min=1, help="Longest run of turns without a file change allowed."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (alone on stdout)."),
) -> None:
    """Keep reward > 0 trajectories without infrastructure failures, bad tool calls or loops; write --out."""
    from rich.console import Console
    from rich.table import Table

    from cuda_agent.recipe.rft import RftThresholds, run_filter

    thresholds = RftThresholds(
        min_reward=min_reward,
        max_malformed_calls=max_malformed_calls,
        max_unknown_tool_calls=max_unknown_tool_calls,
        max_schema_errors=max_schema_errors,
        max_repeated_calls=max_repeated_calls,
        max_idle_turns=max_idle_turns,
    )
    report = run_filter(trajectories, out, thresholds)
    if as_json:
        typer.echo(json.dumps(report.model_dump(), indent=2))
        return
    demos = f" ({report.demonstrations} of them demonstrations)" if report.demonstrations else ""
    table = Table(title=f"rft filter: kept {report.kept} of {report.read}{demos} -> {report.output}")
    for column in ("rule", "allows", "dropped", "tripped"):
        table.add_column(column, justify="left" if column in ("rule", "allows") else "right")
    for count in report.rules:
        table.add_row(count.rule, count.threshold, str(count.dropped), str(count.tripped))
    Console().print(table)

"""`cuda-agent defences`: the catalogue of defences, listed, one record shown, or rendered as docs/defences.md."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from cuda_agent.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("defences")(defences)


def defences(
    defence_id: Optional[str] = typer.Argument(None, metavar="[ID]", help="Show this defence (default: list all)."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print docs/defences.md as it should be."),
    as_json: bool = typer.Option(False, "--json", help="Print the records (or the one named) as JSON."),
) -> None:
    """What the harness refuses a candidate, where it is enforced and which tests prove it.

    Examples: cuda-agent defences; cuda-agent defences result_caching;
    cuda-agent defences --markdown > docs/defences.md
    """
    from cuda_agent.sandbox_pool.harness.defences import CATALOGUE, by_id
    from cuda_agent.sandbox_pool.harness.defences.render import markdown

    if as_markdown:
        typer.echo(markdown(), nl=False)
        return
    try:
        chosen = CATALOGUE if defence_id is None else (by_id(defence_id),)
    except KeyError as exc:
        raise ConfigError(exc.args[0]) from None
    if as_json:
        typer.echo(json.dumps([d.model_dump() for d in chosen], indent=2))
        return
    console = Console()
    if defence_id is None:
        table = Table("defence", "threat", "refuses", "stages", title="Defences (cuda-agent defences ID for one)")
        for d in chosen:
            table.add_row(d.id, str(d.threat or "-"), d.refuses, ", ".join(d.stages))
        console.print(table)
        return
    d = chosen[0]
    for label, value in (("refuses", d.refuses), ("rule", d.rule), ("why", d.reason),
                         ("stages", ", ".join(d.stages)), ("enforced by", "\n  ".join(d.enforced_by)),
                         ("must fail", "\n  ".join(d.hacks) or f"no test yet: {d.untested}"),
                         ("must pass", "\n  ".join(d.honest))):
        console.print(f"[bold]{label}[/bold]: {value}", highlight=False, soft_wrap=True)

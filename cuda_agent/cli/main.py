"""Entry point of the ``cuda-agent`` console command.

Command groups are defined next to the code they drive and mounted here. Modules
mounted here must stay light at import time: Ray, veRL, the Docker SDK and the HTTP
service are imported inside the commands that use them (``init`` and ``eval`` never load
them). Every command runs under one contract (exit codes, one-line errors, ``--debug``):
`cuda_agent.cli.contract`.
"""

from __future__ import annotations

import importlib
import sys

if __name__ == "__main__":  # `python -m cuda_agent.cli.main ...`: the console script's early start (entry.py)
    from cuda_agent.cli.entry import start_early_work

    start_early_work(sys.argv[1:])

import typer  # noqa: E402

from cuda_agent.cli.contract import ContractGroup, configure_logging, set_debug  # noqa: E402

app = typer.Typer(
    name="cuda-agent",
    help="Train and evaluate LLMs that write fast CUDA kernels (CUDA Agent on veRL).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=ContractGroup,
)

# (module, attribute, group name or None for top-level commands)
_MOUNTS: list[tuple[str, str, str | None]] = [
    ("cuda_agent.cli.workspace_cmds", "register", None),
    ("cuda_agent.sandbox_pool.terminal.cli", "app", "sandbox"),
    ("cuda_agent.tools.cli", "register", None),
    ("cuda_agent.sandbox_pool.pool.cli", "app", "pool"),
    ("cuda_agent.data_gen.cli", "app", "data"),
    ("cuda_agent.evaluation.cli", "register", None),
    ("cuda_agent.sandbox_pool.harness.defences.cli", "register", None),
    ("cuda_agent.service.cli", "register", None),
    ("cuda_agent.recipe.rft_cli", "app", "rft"),
    ("cuda_agent.recipe.value_cli", "app", "value"),
]


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show the full traceback of an error "
                                     "(also CUDA_AGENT_DEBUG=1).")) -> None:
    """Train and evaluate LLMs that write fast CUDA kernels (CUDA Agent on veRL).

    Exit codes of every command: 0 success, 2 usage or input error (one line on stderr
    saying what to fix), 3 infrastructure failure, 1 a bug (rerun with --debug).
    """
    set_debug(debug)
    configure_logging()


def _mount() -> None:
    for module_name, attribute, group in _MOUNTS:
        module = importlib.import_module(module_name)
        target = getattr(module, attribute)
        if group is None:
            target(app)
        else:
            app.add_typer(target, name=group)


_mount()

if __name__ == "__main__":
    from cuda_agent.cli.entry import run

    run(app, sys.argv[1:])

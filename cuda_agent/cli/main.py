"""Entry point of the ``cuda-agent`` console command.

Command groups are defined next to the code they drive and mounted here. Modules
mounted here must stay light at import time: Ray, veRL and the Docker SDK are imported
inside the commands that use them (``init`` and ``eval`` never load them).
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="cuda-agent",
    help="Train and evaluate LLMs that write fast CUDA kernels (CUDA Agent on veRL).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# (module, attribute, group name or None for top-level commands)
_MOUNTS: list[tuple[str, str, str | None]] = [
    ("cuda_agent.cli.workspace_cmds", "register", None),
    ("cuda_agent.sandbox_pool.terminal.cli", "app", "sandbox"),
    ("cuda_agent.tools.cli", "register", None),
    ("cuda_agent.sandbox_pool.pool.cli", "app", "pool"),
    ("cuda_agent.data_gen.cli", "app", "data"),
]


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
    app()

"""`cuda-agent value`: stage 3, value pre-training of the critic (recipe/cuda_agent/value_pretrain.py).

Light at import (mounted into the main CLI): torch, transformers and veRL load inside the command.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import List

import typer

app = typer.Typer(help="Value pre-training (stage 3): the critic learns collected trajectories' values.",
                  no_args_is_help=True)


@app.command("pretrain")
def pretrain_cmd(
    trajectories: List[Path] = typer.Argument(..., help="Trajectory parquet files or folders (records)."),
    model: Path = typer.Option(..., "--model", help="HF folder the critic starts from (the policy or a critic)."),
    out: Path = typer.Option(..., "--out", "-o", help="Critic checkpoint folder to write (stage 4's "
                             "critic.model.path); must not exist."),
    steps: int = typer.Option(100, min=1, help="Optimizer steps."),
    batch_size: int = typer.Option(4, min=1, help="Trajectories per step."),
    lr: float = typer.Option(1e-5, min=0.0, help="AdamW learning rate."),
    max_length: int = typer.Option(131072, min=16, help="Longest trajectory (tokens); longer is an error."),
    device: str = typer.Option("cuda", help="torch device (cuda, cuda:1, cpu)."),
    dtype: str = typer.Option("bfloat16", help="float32 or bfloat16."),
    random_init: bool = typer.Option(False, help="Random weights from config.json (smoke tests only)."),
    gradient_checkpointing: bool = typer.Option(False, help="Save memory on long trajectories."),
    seed: int = typer.Option(0, help="Shuffling / head initialisation seed."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (alone on stdout)."),
) -> None:
    """Train a one-output value head (and the body) on GAE targets (gamma 1, lambda 0.95); write --out."""
    from cuda_agent.errors import ConfigError
    from cuda_agent.recipe.value_pretrain import ValuePretrainConfig, train

    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device}: no CUDA device here; pass --device cpu or run on a GPU machine")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = ValuePretrainConfig(
        model_path=str(model), trajectories=[str(p) for p in trajectories], output_dir=str(out), steps=steps,
        batch_size=batch_size, lr=lr, max_length=max_length, device=device, dtype=dtype, random_init=random_init,
        gradient_checkpointing=gradient_checkpointing, seed=seed,
    )
    result = train(config)
    if as_json:
        typer.echo(json.dumps(result.model_dump(), indent=2))
    else:
        typer.echo(f"critic written to {result.output_dir}: {result.trajectories} trajectories, "
                   f"loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f} over {len(result.losses)} steps")

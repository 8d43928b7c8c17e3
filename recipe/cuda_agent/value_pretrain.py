"""Stage 3, value pre-training: the critic learns the collected trajectories' values offline.

The paper, section 3: before agentic PPO, the critic is trained on trajectories of the stage-1 (or
RFT) policy so that its first advantages are not noise. Per trajectory:

- tokens: veRL's own ``MultiTurnSFTDataset`` renders the record (cuda_agent.recipe.records); its
  loss mask is 1 exactly on the model's tokens, so observation tokens are masked;
- values: the critic is a ``AutoModelForTokenClassification`` with one label — the form veRL's
  critic loads from ``critic.model.path`` — and, as veRL's critic does, the value of token t is
  read at position t - 1 (``verl.workers.utils.padding.no_padding_2_padding``);
- targets: the trajectory's reward on its last model token, GAE with gamma = 1 and lambda = 0.95
  from the critic's own current values (``verl.trainer.ppo.core_algos.compute_gae_advantage_return``),
  recomputed every step;
- loss: ``core_algos.compute_value_loss`` (0.5 * token-mean squared error; its clipping is inactive
  because the "old" values are this step's own).

Infrastructure failures are skipped (they carry no reward). The result is a Hugging Face folder
(weights, config with ``num_labels=1``, tokenizer) that stage 4 passes as ``critic.model.path``.
One process, one device: a critic too large for that is warmed up online instead
(``trainer.critic_warmup``, docs/training.md).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import ConfigError
from cuda_agent.recipe.records import TrajectoryRecord, read_records, write_parquet
from cuda_agent.recipe.rft import check_trainable

logger = logging.getLogger(__name__)


class ValuePretrainConfig(BaseModel):
    """Options of one value pre-training run."""

    model_config = ConfigDict(extra="forbid")

    model_path: str = Field(description="Hugging Face folder of the critic's start: the policy (stage 1/RFT) "
                            "or a critic; a causal-LM checkpoint gets a fresh one-output value head.")
    trajectories: list[str] = Field(description="Trajectory parquet files or folders (records).")
    output_dir: str = Field(description="Where the critic checkpoint is written (must not exist).")
    steps: int = Field(100, ge=1, description="Optimizer steps.")
    batch_size: int = Field(4, ge=1, description="Trajectories per step.")
    lr: float = Field(1e-5, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, gt=0, description="Gradient-norm clip.")
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount (SPEC: 1).")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda (SPEC: 0.95).")
    cliprange_value: float = Field(0.5, gt=0, description="veRL's value clip (inactive: old values are current).")
    max_length: int = Field(131072, ge=16, description="Longest trajectory in tokens; a longer one is an error.")
    device: str = Field("cuda", description="torch device.")
    dtype: Literal["float32", "bfloat16"] = Field("bfloat16", description="Model weights dtype.")
    random_init: bool = Field(False, description="Build the model from config.json with random weights (smoke tests).")
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory on long trajectories.")
    seed: int = Field(0, description="Shuffling and head initialisation seed.")


class ValuePretrainResult(BaseModel):
    """What a run did."""

    model_config = ConfigDict(extra="forbid")

    output_dir: str = Field(description="The critic checkpoint.")
    trajectories: int = Field(description="Trajectories trained on.")
    skipped_infra: int = Field(description="Infrastructure failures skipped.")
    losses: list[float] = Field(description="Value loss per step.")


def load_trajectories(paths: list[str]) -> tuple[list[TrajectoryRecord], int]:
    """(trainable records, infrastructure failures skipped); ConfigError on bad input."""
    records, skipped = [], 0
    for index, record in enumerate(read_records(paths)):
        if record.infra_failure:
            skipped += 1
            continue
        check_trainable(record, f"trajectory {index}")
        if record.reward is None:
            raise ConfigError(f"trajectory {record.task_id!r} has no reward and is not an infrastructure failure")
        records.append(record)
    if not records:
        raise ConfigError(f"no trainable trajectory in {', '.join(paths)} ({skipped} infrastructure failures)")
    return records, skipped


def _check_model_path(path: str, random_init: bool) -> None:
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"--model {path}: not a Hugging Face model folder (no config.json); pass the stage-1 "
                          "merged checkpoint (python -m verl.model_merger) or the RFT checkpoint")
    if not random_init and not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise ConfigError(f"--model {path}: no weights (*.safetensors / *.bin); merge the checkpoint first "
                          "or pass --random-init for a smoke test")


def tokenize(records: list[TrajectoryRecord], tokenizer, max_length: int, workdir: Path) -> list[dict]:
    """(input_ids, loss_mask) per record, rendered by veRL's MultiTurnSFTDataset."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    path = workdir / "value_pretrain_input.parquet"
    write_parquet(records, path)
    config = OmegaConf.create({
        "max_length": max_length + 1,  # no_padding cuts silently; longer ones are caught below
        "pad_mode": "no_padding",
        "truncation": "error",
        "messages_key": "messages",
        "tools_key": "tools",
        "ignore_input_ids_mismatch": True,  # consecutive tool results (records.py, docs/training.md)
    })
    dataset = MultiTurnSFTDataset(str(path), tokenizer, config)
    items = []
    for index, record in enumerate(records):
        item = dataset[index]
        if len(item["input_ids"]) > max_length:
            raise ConfigError(f"trajectory {record.task_id!r} is longer than --max-length {max_length} tokens; "
                              "raise it (the critic must see the whole trajectory)")
        items.append({"input_ids": item["input_ids"], "loss_mask": item["loss_mask"], "reward": float(record.reward)})
    return items


def load_critic(config: ValuePretrainConfig):
    """(model, tokenizer): AutoModelForTokenClassification with num_labels=1."""
    import torch
    from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

    _check_model_path(config.model_path, config.random_init)
    dtype = getattr(torch, config.dtype)
    model_config = AutoConfig.from_pretrained(config.model_path)
    model_config.num_labels = 1
    model_config.classifier_dropout = 0.0
    torch.manual_seed(config.seed)
    if config.random_init:
        model = AutoModelForTokenClassification.from_config(model_config, torch_dtype=dtype)
    else:
        model = AutoModelForTokenClassification.from_pretrained(config.model_path, config=model_config, torch_dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(config.model_path)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.to(config.device), tokenizer


def value_targets(values, loss_mask, rewards, gamma: float, lam: float):
    """(token rewards, returns, mask) for value predictions ``values`` (B, T) of tokens 1..T.

    ``loss_mask`` (B, T) is the model-token mask of those tokens; the reward sits on each row's
    last model token; returns come from veRL's GAE on the detached values.
    """
    import torch
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    mask = loss_mask.to(values.dtype)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, -1).max(dim=1).values
    token_rewards = torch.zeros_like(values)
    token_rewards[torch.arange(values.shape[0]), last] = rewards.to(values.dtype)
    _, returns = compute_gae_advantage_return(token_rewards, values.detach(), mask, gamma=gamma, lam=lam)
    return token_rewards, returns, mask


def value_loss_of(model, batch: list[dict], config: ValuePretrainConfig):
    """The batch's value loss (a scalar with gradients)."""
    import torch
    from verl.trainer.ppo.core_algos import compute_value_loss

    width = max(len(item["input_ids"]) for item in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    attention = torch.zeros(len(batch), width, dtype=torch.long)
    model_tokens = torch.zeros(len(batch), width, dtype=torch.long)
    for row, item in enumerate(batch):
        length = len(item["input_ids"])
        ids[row, :length] = item["input_ids"]
        attention[row, :length] = 1
        model_tokens[row, :length] = item["loss_mask"]
    rewards = torch.tensor([item["reward"] for item in batch])
    device = config.device
    logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
    values = logits[:, :-1, 0].float()  # the value of token t is read at t - 1, as veRL's critic does
    mask = (model_tokens[:, 1:] * attention[:, 1:]).to(device)
    _, returns, mask = value_targets(values, mask, rewards.to(device), config.gamma, config.lam)
    loss, _ = compute_value_loss(
        vpreds=values, returns=returns, values=values.detach(), response_mask=mask,
        cliprange_value=config.cliprange_value, loss_agg_mode="token-mean",
    )
    return loss


def train(config: ValuePretrainConfig) -> ValuePretrainResult:
    """Run value pre-training and write the critic checkpoint (atomically: a temporary folder renamed)."""
    import torch

    output = Path(config.output_dir)
    if output.exists():
        raise ConfigError(f"--out {output} exists; remove it or choose another folder (the pipeline skips a "
                          "stage whose output exists)")
    records, skipped = load_trajectories(config.trajectories)
    model, tokenizer = load_critic(config)
    with tempfile.TemporaryDirectory() as workdir:
        items = tokenize(records, tokenizer, config.max_length, Path(workdir))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    order = random.Random(config.seed)
    model.train()
    losses: list[float] = []
    queue: list[dict] = []
    for step in range(config.steps):
        batch = []
        while len(batch) < min(config.batch_size, len(items)):
            if not queue:
                queue = order.sample(items, len(items))
            batch.append(queue.pop())
        loss = value_loss_of(model, batch, config)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
        logger.info("value pre-training step %d/%d: loss %.6f", step + 1, config.steps, losses[-1])
    result = ValuePretrainResult(output_dir=str(output), trajectories=len(items), skipped_infra=skipped, losses=losses)
    save_critic(model, tokenizer, output, result)
    return result


def save_critic(model, tokenizer, output: Path, result: ValuePretrainResult) -> None:
    """save_pretrained into a temporary sibling, then rename: the folder exists only when complete."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        (partial / "value_pretrain.json").write_text(json.dumps(result.model_dump(), indent=1))
        os.replace(partial, output)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise

"""Stage 5, export: veRL parquet (single-turn and agentic RL), an SFT parquet, KernelBench folders.

Outputs (idempotent: the same input writes the same files; the files of a previous export are removed first):
    verl/single_turn.parquet   rows for the recipe's single-turn loop (agent_name ``cuda_agent_single_turn``)
    verl/agentic.parquet       rows for the ``cuda_agent`` agent loop (150 turns)
    verl/*_val.parquet         the validation split, when val_fraction > 0 (split by a hash of the task id);
                               its agentic rows name ``cuda_agent_eval`` (200 turns, as the paper evaluates)
    sft.parquet                a `messages` column (prompt + solution) for tasks that carry a solution
    kernelbench/level<N>/<i>_<name>.py   one KernelBench-format file per task, plus manifest.jsonl

veRL rows follow the dataset contract (docs/verl.md, "Dataset contract"): ``data_source``, ``agent_name``, ``prompt``
(chat messages), ``reward_model`` {style: "rule", ground_truth: task id}, ``extra_info``
{task_id, problem_src, device, precision_policy, level, source, index} — flat strings and ints
only, since parquet merges the dicts of all rows into one struct type.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.data_gen.ids import safe
from cuda_agent.data_gen.models import Device, Task
from cuda_agent.data_gen.progress import ProgressFn, no_progress
from cuda_agent.data_gen.prompts import agentic_messages, sft_messages, single_turn_messages
from cuda_agent.data_gen.store import JsonlStore
from cuda_agent.dataset_row import RowInfo
from cuda_agent.errors import ConfigError

logger = logging.getLogger(__name__)

AGENTIC_AGENT = "cuda_agent"
EVAL_AGENT = "cuda_agent_eval"
"""Agentic rows of the validation split: the recipe's evaluation loop (200 turns instead of 150)."""
SINGLE_TURN_AGENT = "cuda_agent_single_turn"
"""The recipe's single-turn loop (recipe/cuda_agent/single_turn.py); veRL's plain one is ``single_turn_agent``."""
PRECISION_POLICY = "paper"


class ExportReport(BaseModel):
    """What `export` wrote."""

    model_config = ConfigDict(extra="forbid")

    tasks: int = Field(description="Tasks read.")
    train_rows: int = Field(description="Rows in each train parquet.")
    val_rows: int = Field(description="Rows in each validation parquet.")
    sft_rows: int = Field(description="Rows in sft.parquet (tasks with a solution).")
    kernelbench_files: int = Field(description="Files written under kernelbench/.")
    files: list[str] = Field(description="Every file written, relative to the output folder.")


def extra_info(task: Task, device: Device, index: int) -> dict[str, Any]:
    """The flat ``extra_info`` struct of one row (``RowInfo``, the contract its readers check)."""
    return RowInfo(task_id=task.id, problem_src=task.source, device=device, precision_policy=PRECISION_POLICY,
                   level=int(task.level), source=task.provenance.generator, index=index).to_row()


def verl_row(task: Task, *, agentic: bool, device: Device, index: int, data_source: str,
             single_turn_agent: str = SINGLE_TURN_AGENT, agentic_agent: str = AGENTIC_AGENT) -> dict[str, Any]:
    """One veRL dataset row."""
    prompt = agentic_messages(task, device) if agentic else single_turn_messages(task, device)
    return {
        "data_source": data_source,
        "agent_name": agentic_agent if agentic else single_turn_agent,
        "prompt": prompt,
        "reward_model": {"style": "rule", "ground_truth": task.id},
        "extra_info": extra_info(task, device, index),
    }


def is_validation(task_id: str, fraction: float) -> bool:
    """Stable split: a task stays on its side when other tasks are added or removed."""
    bucket = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return bucket < fraction


def write_parquet(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Rows to parquet through pandas/pyarrow (imported here: export is the only stage needing them)."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(list(rows)).to_parquet(path, index=False)


def _write_verl(tasks: Sequence[Task], out: Path, *, device: Device, data_source: str, val_fraction: float,
                single_turn_agent: str, progress: ProgressFn = no_progress) -> tuple[list[str], int, int]:
    splits = {"": [t for t in tasks if not is_validation(t.id, val_fraction)],
              "_val": [t for t in tasks if is_validation(t.id, val_fraction)]}
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    done = 0
    for suffix, chosen in splits.items():
        agentic_agent = EVAL_AGENT if suffix == "_val" else AGENTIC_AGENT
        for i, task in enumerate(chosen):
            for kind, agentic in (("single_turn", False), ("agentic", True)):
                rows.setdefault((kind, suffix), []).append(
                    verl_row(task, agentic=agentic, device=device, index=i, data_source=data_source,
                             single_turn_agent=single_turn_agent, agentic_agent=agentic_agent))
            done += 1
            progress(done, len(tasks))  # counts tasks, not formats
    files = []
    for kind in ("single_turn", "agentic"):
        for suffix in splits:
            if (kind, suffix) not in rows:
                continue
            path = out / "verl" / f"{kind}{suffix}.parquet"
            write_parquet(rows[(kind, suffix)], path)
            files.append(str(path.relative_to(out)))
    return files, len(splits[""]), len(splits["_val"])


def _write_sft(tasks: Sequence[Task], out: Path, device: Device) -> tuple[list[str], int]:
    solved = [t for t in tasks if t.solution]
    if not solved:
        logger.info("no task carries a solution: sft.parquet not written")
        return [], 0
    rows = [{"messages": sft_messages(t, device), "task_id": t.id, "data_source": "cuda_agent/sft"} for t in solved]
    write_parquet(rows, out / "sft.parquet")
    return ["sft.parquet"], len(rows)


def _write_kernelbench(tasks: Sequence[Task], out: Path) -> list[str]:
    root = out / "kernelbench"
    counters: dict[int, int] = {}
    manifest, files = [], []
    for task in tasks:
        counters[task.level] = counters.get(task.level, 0) + 1
        relative = Path(f"level{task.level}") / f"{counters[task.level]}_{safe(task.name)}.py"
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(task.source, encoding="utf-8")
        manifest.append({"file": str(relative), "task_id": task.id, "ops": task.ops})
        files.append(str(Path("kernelbench") / relative))
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.jsonl").write_text("".join(json.dumps(m) + "\n" for m in manifest), encoding="utf-8")
    return [*files, "kernelbench/manifest.jsonl"]


def attach_solutions(tasks: Sequence[Task], solutions_dir: str | Path) -> list[Task]:
    """Tasks with `solution` read from ``<solutions_dir>/<task id or name>/`` (model_new.py and kernels/*)."""
    root = Path(solutions_dir)
    attached = []
    for task in tasks:
        folder = next((root / n for n in (task.id, task.name) if (root / n / "model_new.py").is_file()), None)
        if folder is None:
            attached.append(task)
            continue
        files = {"model_new.py": (folder / "model_new.py").read_text(encoding="utf-8")}
        for kernel in sorted((folder / "kernels").glob("*")) if (folder / "kernels").is_dir() else []:
            if kernel.is_file():
                files[f"kernels/{kernel.name}"] = kernel.read_text(encoding="utf-8")
        attached.append(task.model_copy(update={"solution": files}))
    return attached


def export(
    tasks_path: str | Path,
    out_dir: str | Path,
    *,
    device: Device = "cuda",
    data_source: str = "cuda_agent/ops",
    val_fraction: float = 0.0,
    formats: Sequence[str] = ("verl", "sft", "kernelbench"),
    single_turn_agent: str = SINGLE_TURN_AGENT,
    solutions_dir: str | Path | None = None,
    progress: ProgressFn = no_progress,
) -> ExportReport:
    """Write the chosen `formats` for every task of the JSONL file `tasks_path` into `out_dir`."""
    unknown = set(formats) - {"verl", "sft", "kernelbench"}
    if unknown:
        raise ConfigError(f"unknown export formats {sorted(unknown)}; choose from verl, sft, kernelbench")
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}")
    tasks = JsonlStore(tasks_path, Task).load()
    if solutions_dir is not None:
        tasks = attach_solutions(tasks, solutions_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in (out / "verl", out / "sft.parquet", out / "kernelbench"):  # a previous export's files must not survive
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    files: list[str] = []
    train = val = sft = kb = 0
    if "verl" in formats:
        written, train, val = _write_verl(tasks, out, device=device, data_source=data_source,
                                          val_fraction=val_fraction, single_turn_agent=single_turn_agent,
                                          progress=progress)
        files += written
    if "sft" in formats:
        written, sft = _write_sft(tasks, out, device)
        files += written
    if "kernelbench" in formats:
        written = _write_kernelbench(tasks, out)
        kb = len(written) - 1
        files += written
    progress(len(tasks), len(tasks))
    return ExportReport(tasks=len(tasks), train_rows=train, val_rows=val, sft_rows=sft, kernelbench_files=kb,
                        files=files)

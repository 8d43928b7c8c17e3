"""Summarise a run of recipe/cuda_agent/run_pipeline_one_gpu.sh from its work folder (or the pipeline_work.tgz
that `PHASES=pipeline bash scripts/gpu-session.sh` returns, unpacked): each PPO stage's step metrics, every
trajectory record (collected and demonstrated), the RFT set and the value pre-training report, as JSON.

    python benchmarks/training/pipeline_summary.py WORK_DIR > summary.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd

METRICS = ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/score/mean", "response_length/mean",
           "timing_s/gen", "timing_s/step")
STEP_LINE = re.compile(r"step:(\d+) - (.*)")


def stage_metrics(log: Path) -> dict[str, dict[str, str]]:
    """The chosen metrics of each step line veRL printed, by step."""
    steps: dict[str, dict[str, str]] = {}
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        match = STEP_LINE.search(line)
        if match:
            pairs = dict(item.split(":", 1) for item in match.group(2).split(" - ") if ":" in item)
            steps[match.group(1)] = {name: pairs[name].strip() for name in METRICS if name in pairs}
    return steps


def records(files: list[Path]) -> list[dict[str, object]]:
    rows = pd.concat([pd.read_parquet(f) for f in files]) if files else pd.DataFrame()
    keep = ["task_id", "reward", "status", "turns", "demonstration"]
    return [{k: (None if pd.isna(v) else v) for k, v in row.items()} for row in rows[keep].to_dict("records")] \
        if len(rows) else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", type=Path, help="The pipeline's WORK_DIR (or pipeline_work.tgz unpacked).")
    work = parser.parse_args().work
    if not work.is_dir():
        parser.error(f"{work}: no such folder")
    value = work / "critic" / "value_pretrain.json"
    summary = {
        "stage1": stage_metrics(work / "logs" / "stage1.log"),
        "stage4": stage_metrics(work / "logs" / "stage4.log"),
        "trajectories": records(sorted((work / "trajectories").glob("*.parquet"))),
        "sft": records([work / "sft.parquet"] if (work / "sft.parquet").exists() else []),
        "value_pretrain": json.loads(value.read_text()) if value.exists() else None,
    }
    print(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()

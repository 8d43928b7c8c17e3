"""Summarise a ppo_one_gpu.sh run: each stage's step metrics, weight syncs, the pool's evaluations, and
the checks issue 43 asks of them (printed, and written to OUT/ppo_summary.json).

    python benchmarks/training/ppo_summary.py OUT [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from cuda_agent.recipe.ppo_log import step_metrics, weight_syncs

FINITE = ("actor/pg_loss", "critic/vf_loss", "critic/score/mean", "timing_s/gen", "timing_s/update_actor",
          "timing_s/update_critic", "timing_s/update_weights")
"""Metrics every step must report as finite numbers."""

BREAKDOWN = ("timing_s/step", "timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/values",
             "timing_s/adv", "timing_s/update_critic", "timing_s/update_actor", "timing_s/update_weights")
"""The step-time breakdown docs/scale.md's model uses."""


def _finite(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def _pool_submitted(out: Path, name: str) -> int | None:
    path = out / f"pool_status_{name}.json"
    try:
        return int(json.loads(path.read_text())["submitted"])
    except (OSError, ValueError, KeyError):
        return None


def stage_summary(out: Path, stage: int, steps: int) -> dict[str, Any] | None:
    """One stage's metrics and checks, or None if it did not run."""
    path = out / f"stage{stage}.log"
    if not path.is_file():
        return None
    log = path.read_text(errors="replace")
    metrics = step_metrics(log)
    syncs = weight_syncs(log)
    checks: dict[str, bool] = {f"{steps} steps logged": all(step in metrics for step in range(1, steps + 1))}
    for step in range(1, steps + 1):
        m = metrics.get(step, {})
        checks[f"step {step}: finite {', '.join(FINITE)}"] = all(_finite(m.get(key)) for key in FINITE)
        checks[f"step {step}: actor/grad_norm > 0"] = _finite(m.get("actor/grad_norm")) and m["actor/grad_norm"] > 0
        checks[f"step {step}: response_length/mean > 0"] = (
            _finite(m.get("response_length/mean")) and m["response_length/mean"] > 0)
    digests = [sync["digests"] for sync in syncs]
    checks["a weight sync after every step, each changing the served tensors"] = (
        len(syncs) >= steps + 1 and all(a != b for a, b in zip(digests, digests[1:])))
    before, after = _pool_submitted(out, f"before_{stage}"), _pool_submitted(out, f"after_{stage}")
    evaluations = None if before is None or after is None else after - before
    summary: dict[str, Any] = {
        "rc": next((line.split("=", 1)[1] for line in reversed(log.splitlines()) if line.startswith("rc=")), None),
        "pool_evaluations": evaluations,
        "weight_syncs": syncs,
        "breakdown_s": {step: {key: m.get(key) for key in BREAKDOWN} for step, m in metrics.items()},
        "steps": metrics,
    }
    if stage == 4:
        corr = {step: {k: v for k, v in m.items() if k.startswith("rollout_corr/")} for step, m in metrics.items()}
        summary["rollout_corr"] = corr
        checks["rollout_corr/* reported every step"] = all(corr.get(step) for step in range(1, steps + 1))
        checks["not every trajectory rejected"] = all(
            _finite(corr.get(step, {}).get("rollout_corr/rollout_rs_seq_masked_fraction"))
            and corr[step]["rollout_corr/rollout_rs_seq_masked_fraction"] < 1.0
            for step in range(1, steps + 1))
        checks["the pool received evaluations from the loop"] = bool(evaluations)
    checks["exit status 0"] = summary["rc"] == "0"
    summary["checks"] = checks
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder ppo_one_gpu.sh wrote")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    stages = {f"stage{stage}": stage_summary(args.out, stage, args.steps) for stage in (1, 4)}
    stages = {name: summary for name, summary in stages.items() if summary is not None}
    (args.out / "ppo_summary.json").write_text(json.dumps(stages, indent=2, default=str))
    for name, summary in stages.items():
        print(f"{name}: rc={summary['rc']} pool_evaluations={summary['pool_evaluations']}")
        for check, ok in summary["checks"].items():
            print(f"  {'ok ' if ok else 'FAIL'} {check}")


if __name__ == "__main__":
    main()

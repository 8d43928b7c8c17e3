"""Does a candidate that fills the GPU's memory escape its verdict? (docs/harness.md, "What is checked")

Evaluates a wrong kernel that holds all but ~64 MB of the device's memory from its first call
(`holding_the_device` of tests/sandbox_pool/harness/test_gpu.py), twice: with the parent's judging as
it is (on the CPU when the device has no memory left: `session.judge`), and with that fallback taken
out (the judging as it was before 2026-12-04: on the device only). Prints one JSON object: each
run's status, reward and error, and whether the judging ran on the CPU; or the exception the
evaluation raised instead of a verdict (no reward: the sample is left out).

Usage: python -P benchmarks/harness/device_memory_escape.py [--out result.json]   (on a GPU node)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/sandbox_pool/harness"))

from test_gpu import PROBLEM, holding_the_device  # noqa: E402

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, Evaluator, EvaluatorConfig  # noqa: E402
from cuda_agent.sandbox_pool.harness import session  # noqa: E402
from cuda_agent.sandbox_pool.harness.reference import own_stream  # noqa: E402


def device_only(device, fn, *args):
    """The judging without its fallback."""
    return own_stream(device, fn, device, *args), False


async def evaluate_twice() -> dict:
    job = EvalJob(problem_src=PROBLEM, files=holding_the_device(wrong=True), device="cuda",
                  options=EvalOptions(seed=11, profile=False))
    runs = {}
    async with Evaluator(EvaluatorConfig(device="cuda")) as evaluator:
        for name, judge in (("with the CPU fallback", session.judge), ("device only (before)", device_only)):
            session.judge = judge
            torch.cuda.empty_cache()
            try:
                result = await evaluator.evaluate(job)
            except Exception as exc:  # what a caller gets instead of a verdict: no reward for the sample
                runs[name] = {"raised": f"{type(exc).__name__}: {str(exc)[:300]}"}
                continue
            log = result.stages["verify"].log if "verify" in result.stages else ""
            runs[name] = {"status": result.status.value, "reward": result.reward, "error": result.error,
                          "judged_on_cpu": "ran on the CPU" in log}
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    text = json.dumps({"device": torch.cuda.get_device_name(0), "runs": asyncio.run(evaluate_twice())}, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

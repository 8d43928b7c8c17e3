"""What the approximation defence costs: verify time with the structured trials and influence twins
(6 draws + 1 twin, the default) against the previous plan (5 draws, no twins).

    .venv/bin/python benchmarks/harness/bench_verify_trials.py --device cpu --repeats 5 \
        --out benchmarks/harness/results/verify_trials_cpu.json

Honest candidates of the harness tests, verification only (no timing); the two plans alternate so
that machine load hits both alike. Prints and writes the median verify-stage seconds per plan.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, Evaluator, EvaluatorConfig

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "tests/sandbox_pool/harness/candidates"
HEADER = "import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\n"
CASES = {
    "scale_bias 512x1024": (
        (CANDIDATES / "problem_scale_bias.py").read_text(), (CANDIDATES / "kernels.cpp").read_text(),
        HEADER + "class ModelNew(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.scale = nn.Parameter(torch.ones(dim))\n        self.bias = nn.Parameter(torch.zeros(dim))\n\n"
        "    def forward(self, x):\n        return cuda_extension.scale_bias(x, self.scale, self.bias)\n"),
    "row sums 64x65536": (
        (CANDIDATES / "problem_row_sums.py").read_text(), (CANDIDATES / "approx_kernels.cpp").read_text(),
        HEADER + "class ModelNew(nn.Module):\n    def __init__(self, cols):\n        super().__init__()\n"
        "        self.gain = nn.Parameter(torch.ones(cols))\n        self.bias = nn.Parameter(torch.zeros(1))\n\n"
        "    def forward(self, x):\n        return cuda_extension.wsum_tree(x, self.gain, self.bias)\n"),
}
CUDA_WSUM = HEADER + ("class ModelNew(nn.Module):\n    def __init__(self, cols):\n        super().__init__()\n"
                      "        self.gain = nn.Parameter(torch.ones(cols))\n        self.bias = nn.Parameter(torch.zeros(1))\n\n"
                      "    def forward(self, x):\n        return cuda_extension.wsum(x, self.gain, self.bias, 1)\n")
CUDA_CASES = {  # name -> (problem, candidate files)
    "diag_matmul 4096x8192": ((ROOT / "examples/problems/diag_matmul_cuda.py").read_text(),
                              {"model_new.py": (ROOT / "examples/solutions/diag_matmul/cuda_fast/model_new.py").read_text(),
                               **{f"kernels/{f.name}": f.read_text() for f in
                                  (ROOT / "examples/solutions/diag_matmul/cuda_fast/kernels").iterdir()}}),
    "row sums 64x65536": ((CANDIDATES / "problem_row_sums.py").read_text(),
                          {"model_new.py": CUDA_WSUM, "kernels/row_sums.cu": (CANDIDATES / "cuda/row_sums.cu").read_text(),
                           "kernels/row_sums_binding.cpp": (CANDIDATES / "cuda/row_sums_binding.cpp").read_text()}),
}
PLANS = {"before (5 draws)": {"correctness_trials": 5, "influence_checks": 0},
         "now (6 draws + 1 twin)": {}}


async def main(args: argparse.Namespace) -> dict:
    table: dict[str, dict[str, float]] = {}
    async with Evaluator(EvaluatorConfig(device=args.device)) as ev:
        cases = ({name: (problem, {"model_new.py": model_new, "kernels/k.cpp": kernels})
                  for name, (problem, kernels, model_new) in CASES.items()} if args.device == "cpu" else CUDA_CASES)
        for case, (problem, files) in cases.items():
            times: dict[str, list[float]] = {plan: [] for plan in PLANS}
            for rep in range(args.repeats + 1):
                for plan, extra in PLANS.items():
                    job = EvalJob(problem_src=problem, files=files,
                                  device=args.device, options=EvalOptions(profile=False, seed=100 + rep, **extra))
                    result = await ev.evaluate(job)
                    assert result.correct, (case, plan, result.error)
                    if rep:  # the first round warms caches (compile, imports)
                        times[plan].append(result.stages["verify"].duration_s or 0.0)
            table[case] = {plan: round(statistics.median(v), 3) for plan, v in times.items()}
            print(case, table[case], file=sys.stderr)
    return {"device": args.device, "repeats": args.repeats, "median_verify_s": table}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    arguments = parser.parse_args()
    report = asyncio.run(main(arguments))
    print(json.dumps(report, indent=2))
    if arguments.out:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(json.dumps(report, indent=2) + "\n")

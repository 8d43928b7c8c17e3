"""What a fresh process pays before its first useful CUDA work: the cold `cuda-agent eval`'s parent.

Each repeat is a fresh Python process that imports torch, initialises CUDA, loads a problem, draws
one input set of every verification distribution and runs the reference once, each step timed on
its own (`--step` mode, internal). Two variants:

    plain    the order the one-shot path has: torch import, then CUDA's first use
    primed   the CUDA driver's primary context created in a thread (ctypes, `cuInit` +
             `cuDevicePrimaryCtxRetain`) while torch imports: the runtime then finds it made

Then `reference.prepare` twice in one process (the first pays CUDA's first kernels, cuBLAS; the
second is the preparation alone). A third kind of run (`ops`) times the first use of each tensor
op the verification draws use, one after the other in a fresh process.

Usage: python benchmarks/harness/bench_cuda_start.py --repeats 3 [--problem examples/problems/diag_matmul_cuda.py]
       (on a GPU node; prints one JSON object)
"""

from __future__ import annotations

import time

T0 = time.monotonic()

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PROBLEM = ROOT / "examples/problems/diag_matmul_cuda.py"


def _steps(problem_path: Path, primed: bool, device: str) -> dict[str, float]:
    """One fresh process's steps, seconds each (run with --step)."""
    marks: dict[str, float] = {}
    last = T0
    primer = None
    if primed:
        from cuda_agent.sandbox_pool.harness.cuda_primer import prime_cuda_context

        primer = prime_cuda_context(0)

    def mark(name: str) -> None:
        nonlocal last
        now = time.monotonic()
        marks[name] = now - last
        last = now

    import torch

    mark("torch import")
    if primer is not None:
        primer.join()
        mark("primer join (after the import)")
        marks["primer took"] = primer.took_s or -1.0
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    torch.zeros(1, device=device)
    sync()
    mark("first tensor (CUDA init)")
    from cuda_agent.sandbox_pool.harness.inputs import DISTRIBUTIONS, draw
    from cuda_agent.sandbox_pool.harness.problem import load_problem

    problem = load_problem(problem_path.read_text())
    mark("problem load")
    inputs = None
    for name in DISTRIBUTIONS:
        inputs = draw(problem.get_inputs, 1234, name, device)
        sync()
        mark(f"first draw: {name}")
    model = problem.model_cls(*problem.get_init_inputs()).to(device)
    mark("reference build")
    model(*inputs)
    sync()
    mark("reference first call")
    model(*inputs)
    sync()
    mark("reference second call")
    from cuda_agent.sandbox_pool.harness.reference import prepare

    for run in ("first", "second"):
        with tempfile.TemporaryDirectory() as work:
            prepare(problem, work, device, seed=7, trials=6, timed_calls=30, atol=1e-2, rtol=1e-2,
                    print_seed=11, influence_checks=1, checked_calls=10)
            sync()
        mark(f"reference.prepare ({run})")
    marks["total"] = time.monotonic() - T0
    return marks


def _first_ops(device: str) -> dict[str, float]:
    """The first use of each tensor op the verification draws use, in a fresh process (--step ops)."""
    import torch

    torch.zeros(1, device=device)
    marks: dict[str, float] = {}
    t = torch.randn(2048, 2048, device=device)
    gen = torch.Generator(device=device).manual_seed(1)
    ops = {
        "aminmax": lambda: torch.aminmax(t),
        "rand (generator)": lambda: torch.rand(t.shape, generator=gen, device=device),
        "compare <": lambda: t < 0.1,
        "index_put scalar index": lambda: (t < 0.1).view(-1).__setitem__(5, True),
        "boolean mask select (nonzero)": lambda: t[t < 0.1],
        "pow(10, tensor)": lambda: torch.pow(10.0, t),
        "where": lambda: torch.where(t < 0, -t, t),
        "masked index_put": lambda: t.clone().__setitem__(t < 0.1, 1.0),
        "masked_fill": lambda: t.masked_fill(t < 0.1, 1.0),
        "linspace": lambda: torch.linspace(0.05, 1.0, 2048, device=device),
        "clamp + pow_": lambda: t.abs().clamp(min=1e-6).pow_(-1.0 / 1.5),
        "sign * abs.pow": lambda: t.abs().pow(2.5) * torch.sign(t),
        "nonzero": lambda: torch.nonzero(t.reshape(-1) < 0.1),
        "roll": lambda: torch.roll(torch.arange(100, device=device), 7),
        "gather by index": lambda: t.reshape(-1)[torch.arange(0, 1000, 3, device=device)],
        "randperm": lambda: torch.randperm(4096, generator=gen, device=device),
        "argsort": lambda: torch.argsort(torch.rand(4096, generator=gen, device=device)),
        "stack + tolist": lambda: torch.stack([t.min(), t.max()]).tolist(),
        "equal + round": lambda: torch.equal(t, torch.round(t)),
    }
    for name, op in ops.items():
        t0 = time.monotonic()
        op()
        if device == "cuda":
            torch.cuda.synchronize()
        marks[name] = time.monotonic() - t0
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--problem", type=Path, default=DEFAULT_PROBLEM)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run of the script")
    parser.add_argument("--step", choices=["plain", "primed", "ops"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step == "ops":
        print(json.dumps(_first_ops(args.device)))
        return
    if args.step:
        print(json.dumps(_steps(args.problem, args.step == "primed", args.device)))
        return
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "primed": [], "ops": []}
    for _ in range(args.repeats):
        for variant, rows in runs.items():  # interleaved: the page cache and clocks treat all alike
            out = subprocess.run([sys.executable, "-P", __file__, "--step", variant, "--problem", str(args.problem),
                                  "--device", args.device], capture_output=True, text=True, cwd=ROOT, check=False)
            if out.returncode != 0:
                sys.exit(f"{variant} run failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    summary = {variant: {step: round(statistics.median(r[step] for r in rows), 4) for step in rows[0]}
               for variant, rows in runs.items()}
    print(json.dumps({"command": " ".join(sys.argv), "problem": str(args.problem), "median_s": summary,
                      "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

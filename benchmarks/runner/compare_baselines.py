"""Compare our measured eager / torch.compile baselines with KernelBench's published timings.

Reads the lines of ``cuda-agent baselines`` and KernelBench's ``results/timing/<GPU>/`` JSON files
(``baseline_time_torch.json``: eager; ``baseline_time_torch_compile_inductor_default.json``:
compile; times in ms, "mean" of 100 trials) and writes a Markdown table: per level, how many
problems both have, the Spearman rank correlation of the times, the median ratio ours / theirs,
and the problem-by-problem times.

    python benchmarks/runner/compare_baselines.py OUR_BASELINES.jsonl .kernelbench/results/timing/H100_Modal --out table.md
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy) if vx and vy else None


def published(folder: Path, name: str) -> dict[str, float]:
    """task_id -> time in us from one KernelBench timing file."""
    path = folder / name
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {f"{level}/{Path(file).stem}": float(entry["mean"]) * 1000.0
            for level, problems in data.items() for file, entry in problems.items() if entry.get("mean") is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ours", type=Path)
    parser.add_argument("timing_dir", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    ours = [json.loads(line) for line in args.ours.read_text().splitlines() if line.strip()]
    theirs = {"eager": published(args.timing_dir, "baseline_time_torch.json"),
              "compile": published(args.timing_dir, "baseline_time_torch_compile_inductor_default.json")}
    device = next((line["device_name"] for line in ours if line.get("device_name")), "?")
    hardware = "?"
    eager_file = args.timing_dir / "baseline_time_torch.json"
    if eager_file.is_file():
        first = next(iter(next(iter(json.loads(eager_file.read_text()).values())).values()))
        hardware = first.get("hardware", "?")
    lines = [f"# Baselines: ours ({device}) vs KernelBench's published ({args.timing_dir.name}: {hardware})", "",
             "Ours: median of the evaluator's timed calls (fresh inputs, cache flushed, CUDA events), "
             "KernelBench's: mean of 100 trials after 3 warm-ups. Spearman = rank correlation of the per-problem "
             "times within a level; ratio = median of ours / theirs.", "",
             "| level | kind | problems | Spearman | median ratio ours/theirs |", "|---|---|---|---|---|"]
    levels = sorted({line["task_id"].split("/")[0] for line in ours})
    for level in levels + ["all"]:
        for kind, field in (("eager", "eager_us"), ("compile", "torch_compile_us")):
            pairs = [(line[field], theirs[kind][line["task_id"]]) for line in ours
                     if line.get(field) and line["task_id"] in theirs[kind]
                     and (level == "all" or line["task_id"].startswith(level + "/"))]
            rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
            ratio = statistics.median(a / b for a, b in pairs) if pairs else None
            lines.append(f"| {level} | {kind} | {len(pairs)} | {'-' if rho is None else f'{rho:.3f}'} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    lines += ["", "| task | ours eager us | KB eager us | ours compile us | KB compile us | measure s |",
              "|---|---|---|---|---|---|"]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    for line in ours:
        task = line["task_id"]
        lines.append(f"| {task} | {fmt(line.get('eager_us'))} | {fmt(theirs['eager'].get(task))} | "
                     f"{fmt(line.get('torch_compile_us'))} | {fmt(theirs['compile'].get(task))} | "
                     f"{line.get('wall_s', 0):.1f} |")
    total = sum(line.get("wall_s", 0.0) for line in ours)
    lines += ["", f"Measured {len(ours)} problems in {total:.0f} s of measurement wall time."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12 + 2 * len(levels)]))


if __name__ == "__main__":
    main()

"""Compare our measured eager / torch.compile baselines with KernelBench's published timings.

Reads the lines of ``cuda-agent baselines`` and one or more of KernelBench's ``results/timing/<GPU>/``
folders (``baseline_time_torch.json``: eager; ``baseline_time_torch_compile_inductor_default.json``:
compile; times in ms, "mean" of 100 trials) and writes a Markdown table: per level and published
set, how many problems both have, the Spearman rank correlation of the times, the median ratio
ours / theirs, and how often torch.compile beats eager in each (a tie when the two are within
``--tie`` of each other: inductor often calls the same library kernel as eager, and a few hundredths
of a percent is no win); then the problem-by-problem times (against the first published set) and
the pass's wall time. With two published sets, the same figures for the two against each other
(how far two H100 measurements agree: the scale for ours).

    python benchmarks/runner/compare_baselines.py OURS.jsonl .kernelbench/results/timing/H100_Modal [MORE_DIRS] --out table.md

No baselines measured (the file missing or empty) is not an error: the table says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

COLUMNS = (("eager", "eager_us", "baseline_time_torch.json"),
           ("compile", "torch_compile_us", "baseline_time_torch_compile_inductor_default.json"))


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
    """task_id -> time in us from one KernelBench timing file ({} if the file is missing)."""
    path = folder / name
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {f"{level}/{Path(file).stem}": float(entry["mean"]) * 1000.0
            for level, problems in data.items() for file, entry in problems.items() if entry.get("mean") is not None}


def hardware(folder: Path) -> str:
    path = folder / COLUMNS[0][2]
    if not path.is_file():
        return "no published timings found there"
    for problems in json.loads(path.read_text()).values():
        for entry in problems.values():
            return str(entry.get("hardware", "?"))
    return "?"


def read_ours(path: Path) -> list[dict]:
    """Our baseline lines; [] if the file is missing or empty; SystemExit naming a broken line."""
    if not path.is_file():
        return []
    lines = []
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
            line["task_id"]  # noqa: B018 - every line names its task
        except (ValueError, KeyError, TypeError):
            raise SystemExit(f"compare_baselines: {path}:{number} is not a `cuda-agent baselines` line") from None
        lines.append(line)
    return lines


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def versus(compile_us: float, eager_us: float, tie: float) -> str:
    """'faster', 'tie' or 'slower': torch.compile against eager, a tie within `tie` (relative)."""
    if compile_us < eager_us * (1.0 - tie):
        return "faster"
    return "slower" if compile_us > eager_us * (1.0 + tie) else "tie"


def tally(verdicts: list[str]) -> str:
    return "/".join(str(verdicts.count(kind)) for kind in ("faster", "tie", "slower"))


def summary_rows(ours: list[dict], theirs: dict[str, dict[str, float]], label: str, tie: float) -> list[str]:
    levels = sorted({line["task_id"].split("/")[0] for line in ours})
    rows = []
    for level in levels + ["all"]:
        mine = [line for line in ours if level == "all" or line["task_id"].startswith(level + "/")]
        for kind, field, _ in COLUMNS:
            pairs = [(line[field], theirs[kind][line["task_id"]]) for line in mine
                     if line.get(field) and line["task_id"] in theirs[kind]]
            rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
            ratio = statistics.median(a / b for a, b in pairs) if pairs else None
            rows.append(f"| {label} | {level} | {kind} | {len(pairs)} | {fmt(rho, '.3f')} | {fmt(ratio, '.2f')} |")
        both = [line for line in mine if line.get("eager_us") and line.get("torch_compile_us")
                and line["task_id"] in theirs["eager"] and line["task_id"] in theirs["compile"]]
        we = [versus(line["torch_compile_us"], line["eager_us"], tie) for line in both]
        they = [versus(theirs["compile"][line["task_id"]], theirs["eager"][line["task_id"]], tie) for line in both]
        agree = sum(a == b for a, b in zip(we, they))
        rows.append(f"| {label} | {level} | compile vs eager | {len(both)} | agree {agree}/{len(both)} | "
                    f"ours {tally(we)}, theirs {tally(they)} |")
    return rows


def calls_line(path: Path | None) -> list[str]:
    """The pass's wall time over the calls that made it (the `--json` summaries of `cuda-agent baselines`)."""
    if path is None or not path.is_file():
        return []
    calls = [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
    if not calls:
        return []
    total = {key: sum(float(call.get(key) or 0.0) for call in calls) for key in ("wall_s", "warm_s", "timed_s")}
    measured = sum(int(call.get("measured") or 0) for call in calls)
    left = calls[-1].get("remaining", "?")
    return ["", f"Pass wall time: {total['wall_s']:.0f} s over {len(calls)} call(s) of `cuda-agent baselines` "
            f"(parallel torch.compile warm-up {total['warm_s']:.0f} s, timed measurements {total['timed_s']:.0f} s; "
            f"jobs {calls[-1].get('jobs', '?')}); {measured} problems measured by these calls, {left} left."]


def table(ours: list[dict], timing_dirs: list[Path], source: Path, tie: float = 0.02) -> list[str]:
    sets = [(folder, {kind: published(folder, name) for kind, _, name in COLUMNS}) for folder in timing_dirs]
    device = next((line["device_name"] for line in ours if line.get("device_name")), "?")
    against = "; ".join(f"{folder.name}: {hardware(folder)}" for folder, _ in sets)
    lines = [f"# Baselines: ours ({device}) vs KernelBench's published ({against})", ""]
    if not ours:
        return lines + [f"No baselines were measured ({source} is missing or empty): nothing to compare."]
    lines += ["Ours: median of the evaluator's timed calls (fresh inputs, cache flushed, CUDA events), "
              "KernelBench's: mean of 100 trials after 3 warm-ups. Spearman = rank correlation of the per-problem "
              "times within a level; ratio = median of ours / theirs; `compile vs eager`: on how many problems "
              f"torch.compile was faster / tied (within {tie:.0%}) / slower than eager, ours and theirs, and on how "
              "many the two verdicts agree.", "",
              "| published | level | kind | problems | Spearman | median ratio ours/theirs |",
              "|---|---|---|---|---|---|"]
    for folder, theirs in sets:
        lines += summary_rows(ours, theirs, folder.name, tie)
    if len(sets) > 1:  # how far two published sets agree with each other: the ceiling for ours against either
        (folder_a, set_a), (folder_b, set_b) = sets[0], sets[1]
        tasks = {line["task_id"] for line in ours}
        as_ours = [{"task_id": task, "eager_us": set_a["eager"].get(task), "torch_compile_us": set_a["compile"].get(task)}
                   for task in sorted(tasks)]
        lines += ["", f"For scale, the two published sets against each other on the same problems (ours = {folder_a.name}):",
                  "", "| published | level | kind | problems | Spearman | median ratio |", "|---|---|---|---|---|---|"]
        lines += summary_rows(as_ours, set_b, f"{folder_a.name} vs {folder_b.name}", tie)
    first = sets[0][1] if sets else {"eager": {}, "compile": {}}
    name = sets[0][0].name if sets else "-"
    lines += ["", f"| task | ours eager us | {name} eager us | ours compile us | {name} compile us | measure s | note |",
              "|---|---|---|---|---|---|---|"]
    for line in ours:
        task = line["task_id"]
        notes = [note for note, on in (("cached", line.get("cached")), ("warmed", line.get("warmed"))) if on]
        if line.get("error"):
            notes.append(str(line["error"])[:80].replace("|", "/").replace("\n", " "))
        lines.append(f"| {task} | {fmt(line.get('eager_us'))} | {fmt(first['eager'].get(task))} | "
                     f"{fmt(line.get('torch_compile_us'))} | {fmt(first['compile'].get(task))} | "
                     f"{line.get('wall_s') or 0.0:.1f} | {'; '.join(notes)} |")
    total = sum(line.get("wall_s") or 0.0 for line in ours)
    no_eager = sum(1 for line in ours if not line.get("eager_us"))
    no_compile = sum(1 for line in ours if line.get("eager_us") and not line.get("torch_compile_us"))
    cached = sum(1 for line in ours if line.get("cached"))
    lines += ["", f"Measured {len(ours)} problems ({cached} read from the baseline cache; {no_eager} without an eager "
              f"time, {no_compile} without a compile time) in {total:.0f} s of timed-measurement wall time."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ours", type=Path)
    parser.add_argument("timing_dirs", type=Path, nargs="+", help="KernelBench results/timing/<GPU> folder(s).")
    parser.add_argument("--calls", type=Path, help="The `--json` summaries of the pass's calls, one a line.")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tie", type=float, default=0.02,
                        help="torch.compile and eager within this fraction of each other are a tie (default 0.02).")
    args = parser.parse_args()
    if not 0.0 <= args.tie < 1.0:
        parser.error(f"--tie {args.tie} must be a fraction in [0, 1), e.g. 0.02")
    ours = read_ours(args.ours)
    lines = table(ours, args.timing_dirs, args.ours, args.tie) + calls_line(args.calls)
    args.out.write_text("\n".join(lines) + "\n")
    if not ours:
        print(f"compare_baselines: no baselines measured ({args.ours} missing or empty); wrote {args.out}",
              file=sys.stderr)
    cut = next((i for i, line in enumerate(lines) if line.startswith("| task |")), len(lines))
    print("\n".join(lines[:cut]))


if __name__ == "__main__":
    main()

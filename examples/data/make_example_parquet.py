"""Write a tiny veRL dataset (single-turn and agentic rows) from examples/problems/*.py.

    python examples/data/make_example_parquet.py [--device cpu|cuda] [--out DIR] [--force]

Writes ``single_turn.parquet`` (agent_name cuda_agent_single_turn) and ``agentic.parquet``
(agent_name cuda_agent), one row per problem each, in the dataset contract of docs/verl.md.
An existing file with other rows (e.g. the committed cpu examples, when writing --device cuda)
is left alone unless --force; pass --out DIR to write elsewhere. Exit 2 on refusal.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = REPO / "examples" / "problems"
DATA_SOURCE = "cuda_agent/examples"


def rows(problems_dir: Path, device: str, agentic: bool) -> list[dict[str, Any]]:
    """Dataset rows, one per problem file."""
    from cuda_agent.dataset_row import RowInfo
    from cuda_agent.recipe.task_prompts import agentic_prompt, single_turn_prompt

    out = []
    for index, path in enumerate(sorted(problems_dir.glob("*.py"))):
        task_id = f"examples/{path.stem}"
        problem_src = path.read_text(encoding="utf-8")
        out.append(
            {
                "data_source": DATA_SOURCE,
                "agent_name": "cuda_agent" if agentic else "cuda_agent_single_turn",
                "prompt": agentic_prompt(task_id, device) if agentic else single_turn_prompt(problem_src, device),
                "reward_model": {"style": "rule", "ground_truth": task_id},
                "extra_info": RowInfo(task_id=task_id, problem_src=problem_src, device=device,
                                      precision_policy="paper", level=1, source="examples", index=index).to_row(),
            }
        )
    return out


class WouldOverwriteError(FileExistsError):
    """A target file holds other rows and --force was not given."""


def write(out_dir: Path, device: str = "cpu", problems_dir: Path = PROBLEMS, *, force: bool = False) -> dict[str, Path]:
    """Write both parquet files; returns their paths by kind. A file that already holds exactly these
    rows is left as it is; one with other rows raises WouldOverwriteError unless `force`."""
    import pandas as pd

    tables = {kind: rows(problems_dir, device, agentic) for kind, agentic in (("single_turn", False),
                                                                             ("agentic", True))}
    if not tables["single_turn"]:
        raise SystemExit(f"no problems found in {problems_dir}")
    paths = {kind: out_dir / f"{kind}.parquet" for kind in tables}
    differing = [str(paths[k]) for k in tables if paths[k].exists() and _stored_rows(paths[k]) != tables[k]]
    if differing and not force:
        raise WouldOverwriteError(f"{', '.join(differing)} already hold other rows; pass --out DIR to write "
                                  "elsewhere, or --force to replace them")
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind, table in tables.items():
        if not paths[kind].exists() or str(paths[kind]) in differing:
            pd.DataFrame(table).to_parquet(paths[kind], index=False)
    return paths


def _stored_rows(path: Path) -> list[dict[str, Any]] | None:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception:  # noqa: BLE001 - an unreadable file is "other rows"
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--problems", type=Path, default=PROBLEMS)
    parser.add_argument("--force", action="store_true", help="replace files that hold other rows")
    args = parser.parse_args()
    try:
        paths = write(args.out, args.device, args.problems, force=args.force)
    except WouldOverwriteError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    for kind, path in paths.items():
        print(f"{kind}: {path}")


if __name__ == "__main__":
    main()

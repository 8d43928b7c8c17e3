"""Write a tiny veRL dataset (single-turn and agentic rows) from examples/problems/*.py.

    python examples/data/make_example_parquet.py [--device cpu|cuda] [--out examples/data]

Writes ``single_turn.parquet`` (agent_name cuda_agent_single_turn) and ``agentic.parquet``
(agent_name cuda_agent), one row per problem each, in the dataset contract of docs/verl.md.
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
                "extra_info": {
                    "task_id": task_id,
                    "problem_src": problem_src,
                    "device": device,
                    "precision_policy": "paper",
                    "level": 1,
                    "source": "examples",
                    "index": index,
                },
            }
        )
    return out


def write(out_dir: Path, device: str = "cpu", problems_dir: Path = PROBLEMS) -> dict[str, Path]:
    """Write both parquet files; returns their paths by kind."""
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for kind, agentic in (("single_turn", False), ("agentic", True)):
        table = rows(problems_dir, device, agentic)
        if not table:
            raise SystemExit(f"no problems found in {problems_dir}")
        paths[kind] = out_dir / f"{kind}.parquet"
        pd.DataFrame(table).to_parquet(paths[kind], index=False)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--problems", type=Path, default=PROBLEMS)
    args = parser.parse_args()
    for kind, path in write(args.out, args.device, args.problems).items():
        print(f"{kind}: {path}")


if __name__ == "__main__":
    main()

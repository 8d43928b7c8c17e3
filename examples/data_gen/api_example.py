"""The data pipeline through its Python API, on the CPU in about a minute.

    python examples/data_gen/api_example.py [OUT_DIR]

Same stages as ``cuda-agent data pipeline --device cpu``; see docs/data_gen.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cuda_agent.data_gen.compose import compose
from cuda_agent.data_gen.crawl import crawl
from cuda_agent.data_gen.decontam import decontaminate
from cuda_agent.data_gen.export import export
from cuda_agent.data_gen.filter import FilterConfig, filter_tasks

KERNELBENCH_FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "data_gen" / "kernelbench_fixture"


def main(out: Path) -> None:
    seeds = crawl(out / "seeds.jsonl", size="tiny")
    print(f"seeds: {seeds.by_library}")
    composed = compose(out / "composed.jsonl", count=20, size="tiny", seeds_path=out / "seeds.jsonl")
    print(f"composed: {composed.written} new")
    config = FilterConfig(device="cpu", compile_backend="eager", workers=2)
    report = filter_tasks(out / "composed.jsonl", out / "filter", config, recheck=True)
    print(f"filter: kept {report.kept}/{report.total}, dropped {report.by_criterion}, "
          f"{report.tasks_per_minute} tasks/min, recheck {report.recheck.fraction if report.recheck else None}")
    clean = decontaminate(out / "filter" / "kept.jsonl", out / "decontam", KERNELBENCH_FIXTURE)
    print(f"decontam: kept {clean.kept}, dropped {clean.dropped}")
    exported = export(out / "decontam" / "clean.jsonl", out / "export", device="cpu")
    print(f"export: {exported.files}")


if __name__ == "__main__":  # required: the filter starts its task processes from a forkserver
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("out/data_gen_example"))

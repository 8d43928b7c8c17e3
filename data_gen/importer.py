"""`import`: read an existing task collection (the released CUDA-Agent-Ops-6K, a KernelBench
dataset file, our own exports) into the pipeline's `Task` JSONL.

The layout of CUDA-Agent-Ops-6K is not documented where this code was written, so the reader
is liberal (assumptions, in order):
- a file (.parquet, .jsonl, .json — a list of objects or {"data"/"train"/"rows": [...]}) or a
  folder holding such files and / or ``*.py`` files (each a KernelBench-format problem);
- the model source is the first present column of `CODE_COLUMNS`, else ``extra_info.problem_src``
  (our veRL export), else the first string column whose value contains ``class Model``;
- optional columns: an id (`ID_COLUMNS`), a name (`NAME_COLUMNS`), the operators
  (`OPS_COLUMNS`: a list or a comma / ' -> ' separated string), a level (`LEVEL_COLUMNS`) and a
  reference solution (`SOLUTION_COLUMNS`: model_new.py text);
- rows whose source is not KernelBench format (no Model / get_inputs / get_init_inputs) are
  skipped and counted.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.data_gen.ids import content_id, safe
from cuda_agent.data_gen.loader import check_source
from cuda_agent.data_gen.models import Provenance, Task, TaskKind
from cuda_agent.data_gen.progress import ProgressFn, no_progress
from cuda_agent.data_gen.store import JsonlStore
from cuda_agent.errors import ConfigError, ProblemError

logger = logging.getLogger(__name__)

CODE_COLUMNS = ("code", "model_code", "pytorch_code", "torch_code", "reference_code", "ref_code", "ref_arch_src",
                "problem_src", "model_py", "model.py", "source", "model", "problem", "content", "python", "src")
ID_COLUMNS = ("task_id", "id", "uid", "problem_id", "Task_ID", "index")
NAME_COLUMNS = ("name", "op_name", "Op_Name", "problem_name", "title", "task_name")
OPS_COLUMNS = ("ops", "operators", "op_list", "ops_list", "origin_ops")
LEVEL_COLUMNS = ("level", "Level_ID", "level_id")
SOLUTION_COLUMNS = ("model_new", "model_new_py", "solution", "cuda_solution")
DATA_SUFFIXES = (".parquet", ".jsonl", ".json")


class Record(BaseModel):
    """One problem read from a collection."""

    model_config = ConfigDict(extra="forbid")

    name: str
    source: str
    original_id: str | None = None
    ops: list[str] = Field(default_factory=list)
    level: int | None = None
    solution: str | None = None
    path: str


class ImportReport(BaseModel):
    """What `import_tasks` did."""

    model_config = ConfigDict(extra="forbid")

    read: int = Field(description="Rows / files read.")
    imported: int = Field(description="Tasks appended to the output.")
    invalid: int = Field(description="Rows whose source is missing or not KernelBench format.")
    duplicates: int = Field(description="Rows whose source text repeats an earlier one (exact duplicates only).")
    skipped_existing: int = Field(description="Tasks already in the output (resumed).")


def _rows_of_file(path: Path) -> Iterator[Mapping[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
    elif path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            yield from (json.loads(line) for line in handle if line.strip())
    elif path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, Mapping):
            data = next((data[k] for k in ("data", "train", "rows", "tasks") if isinstance(data.get(k), list)), [data])
        yield from data
    elif path.suffix == ".py":
        yield {"source": path.read_text(errors="replace"), "name": path.stem}


def _first(row: Mapping[str, Any], columns: tuple[str, ...]) -> Any:
    return next((row[c] for c in columns if row.get(c) not in (None, "")), None)


def _source(row: Mapping[str, Any]) -> str | None:
    value = _first(row, CODE_COLUMNS)
    if isinstance(value, str):
        return value
    extra = row.get("extra_info")
    if isinstance(extra, Mapping) and isinstance(extra.get("problem_src"), str):
        return extra["problem_src"]
    return next((v for v in row.values() if isinstance(v, str) and "class Model" in v), None)


def _ops(value: Any) -> list[str]:
    if isinstance(value, str):
        return [p.strip() for p in re.split(r",|->|\|", value) if p.strip()]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return []


def _level(value: Any) -> int | None:
    match = re.search(r"\d+", str(value)) if value is not None else None
    return int(match.group()) if match and 1 <= int(match.group()) <= 4 else None


def _record(row: Mapping[str, Any], path: Path, position: int) -> Record | None:
    source = _source(row)
    if source is None:
        return None
    original = _first(row, ID_COLUMNS)
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    original = original if original is not None else extra.get("task_id")
    name = _first(row, NAME_COLUMNS) or (path.stem if path.suffix == ".py" else f"{path.stem}_{position}")
    level = _level(_first(row, LEVEL_COLUMNS) or extra.get("level")) or _level(
        next((p for p in path.parts if p.lower().startswith("level")), None))
    solution = _first(row, SOLUTION_COLUMNS)
    return Record(name=str(name), source=source, original_id=str(original) if original is not None else None,
                  ops=_ops(_first(row, OPS_COLUMNS)), level=level,
                  solution=solution if isinstance(solution, str) else None, path=str(path))


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (*DATA_SUFFIXES, ".py"))


def read_records(path: str | Path) -> list[Record]:
    """Every problem found at `path` (rows without any source are dropped); raises ConfigError if none."""
    root = Path(path)
    if not root.exists():
        raise ConfigError(f"{root} does not exist")
    records = []
    for file in _files(root):
        for position, row in enumerate(_rows_of_file(file)):
            if isinstance(row, Mapping) and (record := _record(row, file, position)) is not None:
                records.append(record)
    if not records:
        raise ConfigError(f"no problems found in {root}: expected .parquet/.jsonl/.json with a code column, or .py files")
    return records


def to_task(record: Record, prefix: str = "ops6k") -> Task:
    """The pipeline task for one imported record."""
    task_id = f"{prefix}_{safe(record.original_id)}" if record.original_id else content_id(prefix, record.source)
    level = record.level or (1 if len(record.ops) == 1 else 2)
    return Task(
        id=task_id,
        name=safe(record.name)[:120],
        source=record.source,
        ops=record.ops,
        kind=TaskKind.IMPORTED,
        level=level,
        provenance=Provenance(generator="import", library="mixed", source_path=record.path),
        solution={"model_new.py": record.solution} if record.solution else None,
    )


def import_tasks(path: str | Path, out: str | Path, *, prefix: str = "ops6k",
                 progress: ProgressFn = no_progress) -> ImportReport:
    """Append the valid, distinct problems found at `path` to the JSONL file `out` (resumable)."""
    store = JsonlStore(out, Task)
    existing = store.load()
    existing_ids = {t.id for t in existing}
    sources = {t.source.strip() for t in existing}
    records = read_records(path)
    fresh: list[Task] = []
    fresh_ids: set[str] = set()
    invalid = duplicates = skipped = 0
    for count, record in enumerate(records, 1):
        progress(count, len(records))
        task = to_task(record, prefix)
        if task.id in existing_ids:
            skipped += 1
            continue
        if task.id in fresh_ids:
            duplicates += 1
            continue
        try:
            check_source(task.source)
        except ProblemError as exc:
            logger.debug("skipping %s: %s", task.id, exc)
            invalid += 1
            continue
        if task.source.strip() in sources:
            duplicates += 1
            continue
        sources.add(task.source.strip())
        fresh_ids.add(task.id)
        fresh.append(task)
    written = store.append(fresh)
    return ImportReport(read=len(records), imported=written, invalid=invalid, duplicates=duplicates,
                        skipped_existing=skipped)

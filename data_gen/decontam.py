"""Stage 4, decontaminate: drop tasks whose AST similarity to a KernelBench problem exceeds 0.9.

The reference set is a KernelBench checkout (every ``level*/*.py`` under the given folder, or
every ``*.py`` defining ``class Model`` when there are no level folders) or a dataset file
(.parquet / .jsonl / .json) with a code column (see `importer.read_records`). Similarity is
defined in `similarity.py`.

Writes into the output folder:
    similarity.jsonl   one `SimilarityRecord` per task, kept or not: nearest problem and score (resumable;
                       a record is reused only for the same task source, reference set and normal form)
    clean.jsonl        the tasks at or below the threshold, `max_similarity` and `nearest_reference` set
    report.json        the `DecontamReport`, with the similarity histogram
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.data_gen.filter.models import HistogramBin
from cuda_agent.data_gen.filter.report import histogram
from cuda_agent.data_gen.models import Task
from cuda_agent.data_gen.progress import ProgressFn, no_progress
from cuda_agent.data_gen.similarity import NORMAL_FORM_VERSION, Fingerprint, nearest
from cuda_agent.data_gen.store import JsonlStore, write_json
from cuda_agent.errors import ConfigError

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.9
SIMILARITY_EDGES = tuple(round(0.1 * i, 1) for i in range(10)) + (0.95, 1.0, float("inf"))
SIMILARITY, CLEAN, REPORT = "similarity.jsonl", "clean.jsonl", "report.json"


class Reference(BaseModel):
    """One benchmark problem tasks are compared against."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="e.g. 'level1/19_ReLU.py'.")
    level: int | None = Field(None, description="Level parsed from the folder name, if any.")
    source: str = Field(description="The problem's model.py text.")


class SimilarityRecord(BaseModel):
    """A task's nearest reference problem."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    max_similarity: float = Field(description="Similarity to the nearest reference, in [0, 1].")
    nearest: str | None = Field(description="Name of the nearest reference.")
    dropped: bool = Field(description="max_similarity > threshold.")
    cache_key: str | None = Field(None, description="Digest of the task's source, the reference set and the normal "
                                                    "form's version; the record is reused only when it matches.")


class DecontamReport(BaseModel):
    """What decontamination did."""

    model_config = ConfigDict(extra="forbid")

    reference: str = Field(description="The KernelBench folder or dataset used.")
    references: int = Field(description="Reference problems loaded.")
    threshold: float
    total: int
    kept: int
    dropped: int
    histogram: list[HistogramBin] = Field(description="Tasks per band of max similarity.")
    dropped_examples: list[SimilarityRecord] = Field(description="Up to 20 dropped tasks, most similar first.")
    closest_kept: list[SimilarityRecord] = Field(default_factory=list,
                                                 description="Up to 20 kept tasks, most similar first (every task's "
                                                             "nearest problem is in similarity.jsonl and clean.jsonl).")
    recomputed: int = Field(0, description="Tasks scored again because their source or the reference set changed.")


def _level(path: Path) -> int | None:
    for part in reversed(path.parts):
        if match := re.fullmatch(r"level_?(\d+)", part, flags=re.IGNORECASE):
            return int(match.group(1))
    return None


def load_references(path: str | Path) -> list[Reference]:
    """KernelBench problems from a checkout folder or a dataset file; raises ConfigError if none are found."""
    root = Path(path)
    if not root.exists():
        raise ConfigError(f"--kernelbench {root} does not exist: pass a KernelBench checkout or a dataset file")
    if root.is_file():
        from cuda_agent.data_gen.importer import read_records

        references = [Reference(name=r.name, level=r.level, source=r.source) for r in read_records(root)]
    else:
        files = sorted(p for p in root.rglob("*.py") if _level(p.relative_to(root)) is not None)
        if not files:
            files = sorted(p for p in root.rglob("*.py") if "class Model" in p.read_text(errors="replace"))
        references = [Reference(name=str(p.relative_to(root)), level=_level(p.relative_to(root)),
                                source=p.read_text(errors="replace")) for p in files]
    if not references:
        raise ConfigError(f"no KernelBench problems found under {root} (expected level*/NN_Name.py files)")
    return references


def _reference_key(references: list[Reference]) -> str:
    """Digest of the reference set and the normal form's version (a changed checkout or normaliser re-scores)."""
    digest = hashlib.sha256(f"normal-form-{NORMAL_FORM_VERSION}".encode())
    for reference in sorted(references, key=lambda r: r.name):
        digest.update(f"\x1e{reference.name}\x1f{reference.source}".encode())
    return digest.hexdigest()[:16]


def _fingerprints(references: list[Reference]) -> tuple[list[Reference], list[Fingerprint]]:
    kept, prints = [], []
    for reference in references:
        try:
            prints.append(Fingerprint.of(reference.source))
            kept.append(reference)
        except SyntaxError:
            logger.warning("skipping reference %s: it does not parse", reference.name)
    return kept, prints


def score(task: Task, references: list[Reference], prints: list[Fingerprint], threshold: float) -> SimilarityRecord:
    """The task's nearest reference and whether it crosses `threshold`."""
    try:
        index, value = nearest(Fingerprint.of(task.source), prints)
    except SyntaxError:
        index, value = -1, 0.0
    return SimilarityRecord(task_id=task.id, max_similarity=round(value, 4),
                            nearest=references[index].name if index >= 0 else None, dropped=value > threshold)


def decontaminate(
    tasks_path: str | Path,
    out_dir: str | Path,
    kernelbench: str | Path,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    progress: ProgressFn = no_progress,
) -> DecontamReport:
    """Compare every task of `tasks_path` with the KernelBench problems; see the module docstring."""
    out = Path(out_dir)
    references, prints = _fingerprints(load_references(kernelbench))
    reference_key = _reference_key(references)
    tasks = JsonlStore(tasks_path, Task).load()
    keys = {t.id: hashlib.sha256(f"{reference_key}\x1f{t.source}".encode()).hexdigest()[:16] for t in tasks}
    store = JsonlStore(out / SIMILARITY, SimilarityRecord)
    stored = {r.task_id: r for r in store.load()}
    todo = [t for t in tasks if t.id not in stored or stored[t.id].cache_key != keys[t.id]]
    batch: list[SimilarityRecord] = []
    for count, task in enumerate(todo, 1):
        batch.append(score(task, references, prints, threshold).model_copy(update={"cache_key": keys[task.id]}))
        if len(batch) >= 64 or count == len(todo):
            store.append(batch)
            batch = []
        progress(count, len(todo))
    records = {r.task_id: r for r in store.load()}
    mine = [records[t.id] for t in tasks]
    # The threshold may differ from the one used when a record was written: re-decide.
    for record in mine:
        record.dropped = record.max_similarity > threshold
    clean = [t.model_copy(update={"max_similarity": records[t.id].max_similarity,
                                  "nearest_reference": records[t.id].nearest}) for t in tasks
             if not records[t.id].dropped]
    JsonlStore(out / CLEAN, Task).write(clean)
    dropped = sorted((r for r in mine if r.dropped), key=lambda r: r.max_similarity, reverse=True)
    kept = sorted((r for r in mine if not r.dropped), key=lambda r: r.max_similarity, reverse=True)
    report = DecontamReport(
        reference=str(kernelbench), references=len(references), threshold=threshold, total=len(tasks),
        kept=len(clean), dropped=len(dropped), histogram=histogram((r.max_similarity for r in mine), SIMILARITY_EDGES),
        dropped_examples=dropped[:20], closest_kept=kept[:20], recomputed=sum(t.id in stored for t in todo),
    )
    write_json(out / REPORT, report)
    return report

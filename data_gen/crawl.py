"""Stage 1, crawl: one KernelBench-format seed task per catalogued torch / transformers operator.

Every seed is rendered at the requested size and, unless `check=False`, also rendered at the
`tiny` size and run once on the CPU; seeds that fail there (typically a transformers class
the installed version lacks) are dropped and listed in the report.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.data_gen.ids import seed_id
from cuda_agent.data_gen.loader import import_source
from cuda_agent.data_gen.models import Provenance, Task, TaskKind
from cuda_agent.data_gen.ops import DEFAULT_SIZE, LIBRARIES, Dims, InputSpec, OpTemplate, catalog, size_preset
from cuda_agent.data_gen.ops.render import Step, render_source
from cuda_agent.data_gen.progress import ProgressFn, no_progress
from cuda_agent.data_gen.stage import check_settings
from cuda_agent.data_gen.store import JsonlStore
from cuda_agent.errors import ProblemError

logger = logging.getLogger(__name__)
CHECK_TIMEOUT_S = 120


class CrawlFailure(BaseModel):
    """A catalogued operator that produced no seed."""

    model_config = ConfigDict(extra="forbid")

    op: str = Field(description="Template key.")
    reason: str = Field(description="Why it was dropped.")


class CrawlReport(BaseModel):
    """What `crawl` produced."""

    model_config = ConfigDict(extra="forbid")

    size: str = Field(description="Size preset of the written seeds.")
    checked: bool = Field(description="Whether every seed was run once on the CPU.")
    written: int = Field(description="Seeds appended to the output by this run.")
    skipped_existing: int = Field(description="Seeds already present in the output (resumed).")
    by_library: dict[str, int] = Field(description="Seeds available per library (written or already present).")
    failures: list[CrawlFailure] = Field(default_factory=list, description="Operators dropped, with the reason.")


def _library_version(library: str) -> str | None:
    try:
        module = __import__(library)
    except ImportError:
        return None
    return getattr(module, "__version__", None)


def seed_task(template: OpTemplate, dims: Dims, *, rng_seed: int = 0) -> Task | None:
    """The seed task of `template` at sizes `dims`, or None if its builder rejects them."""
    shape = template.seed_shape(dims)
    call = template.build(shape, dims, random.Random(rng_seed))
    if call is None:
        return None
    primary = InputSpec(shape, template.domain_in, high=dims.vocab)
    variant = f" ({template.variant})" if template.variant else ""
    source = render_source([Step(template, call)], primary, f"Applies {template.op}{variant}.")
    library = "transformers" if template.family == "transformers" else "torch"
    return Task(
        id=seed_id(template.key),
        name=template.short_name,
        source=source,
        ops=[template.op],
        kind=TaskKind.SEED,
        level=1,
        provenance=Provenance(generator="crawl", library=library, library_version=_library_version(library),
                              rng_seed=rng_seed),
    )


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"seed check exceeded {seconds} s")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_seed_once(source: str) -> None:
    """Import `source`, build the model and run one forward on the CPU; raises ProblemError on failure."""
    import torch

    module = import_source(source)
    try:
        with torch.no_grad(), _deadline(CHECK_TIMEOUT_S):
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs())
            model(*module.get_inputs())
    except Exception as exc:  # any failure of the operator itself means: drop this seed
        raise ProblemError(f"{type(exc).__name__}: {exc}") from exc


def _check(template: OpTemplate) -> str | None:
    """None if the template's tiny seed runs, else the reason it does not."""
    tiny = seed_task(template, size_preset("tiny"))
    if tiny is None:
        return "the builder rejects the tiny preset"
    try:
        run_seed_once(tiny.source)
    except ProblemError as exc:
        return str(exc)[:500]
    return None


def crawl(
    out: str | Path,
    *,
    libraries: Sequence[str] = LIBRARIES,
    size: str = DEFAULT_SIZE,
    check: bool = True,
    progress: ProgressFn = no_progress,
) -> CrawlReport:
    """Append the seed tasks of `libraries` at preset `size` to the JSONL file `out` (resumable).

    Refuses (`SettingsChangedError`) to append to seeds made with another size, libraries or check.
    """
    dims = size_preset(size)
    check_settings(out, "crawl", {"size": size, "libraries": sorted(libraries), "check": check})
    store = JsonlStore(out, Task)
    existing = store.ids()
    templates = catalog(libraries)
    failures: list[CrawlFailure] = []
    by_library: dict[str, int] = {}
    fresh: list[Task] = []
    for done, template in enumerate(templates, 1):
        task = seed_task(template, dims)
        reason = None if task is not None else f"the builder rejects the {size} preset"
        if task is not None and task.id not in existing and check:
            reason = _check(template)
        if reason is not None:
            failures.append(CrawlFailure(op=template.key, reason=reason))
            logger.warning("dropping seed %s: %s", template.key, reason)
        elif task is not None:
            by_library[task.provenance.library] = by_library.get(task.provenance.library, 0) + 1
            if task.id not in existing:
                fresh.append(task)
        progress(done, len(templates))
    written = store.append(fresh)
    return CrawlReport(size=size, checked=check, written=written, skipped_existing=len(existing),
                       by_library=by_library, failures=failures)

"""compose: the programmatic composer makes runnable, distinct fused tasks, reproducibly."""

from __future__ import annotations

import itertools
import random

import torch

from cuda_agent.data_gen.compose import compose
from cuda_agent.data_gen.compose.dedupe import Deduper
from cuda_agent.data_gen.compose.programmatic import build_chain, compose_chains
from cuda_agent.data_gen.crawl import run_seed_once
from cuda_agent.data_gen.loader import import_source
from cuda_agent.data_gen.models import Task, TaskKind
from cuda_agent.data_gen.ops import Category, catalog, size_preset
from cuda_agent.data_gen.store import JsonlStore


def _tasks(n: int, seed: int = 0, size: str = "tiny") -> list[Task]:
    return list(itertools.islice(compose_chains(catalog(["torch"]), size_preset(size), seed=seed), n))


def test_fused_tasks_run_and_stack_two_to_five_torch_ops():
    torch.set_num_threads(1)
    tasks = _tasks(40)
    for task in tasks:
        assert task.kind is TaskKind.FUSED and task.level == 2
        assert 2 <= len(task.ops) <= 5
        assert all(op.startswith("torch.") for op in task.ops)
        run_seed_once(task.source)


def test_fused_task_outputs_have_the_chain_shape():
    torch.set_num_threads(1)
    for task in _tasks(10, seed=3):
        module = import_source(task.source)
        out = module.Model(*module.get_init_inputs())(*module.get_inputs())
        assert isinstance(out, torch.Tensor) and out.is_floating_point()


def test_chains_respect_their_structure():
    templates = [t for t in catalog(["torch"]) if t.composable]
    dims = size_preset("small")
    for attempt in range(60):
        chain = build_chain(templates, dims, random.Random(attempt))
        if chain is None:
            continue
        steps, _ = chain
        categories = [s.template.category for s in steps]
        assert all(c not in (Category.REDUCTION, Category.LOSS) for c in categories[:-1])
        assert categories.count(Category.LAYOUT) <= 1


def test_composer_is_reproducible_and_deduplicated():
    first, second = _tasks(25, seed=7), _tasks(25, seed=7)
    assert [t.id for t in first] == [t.id for t in second]
    assert [t.id for t in _tasks(25, seed=8)] != [t.id for t in first]


def test_compose_stage_resumes_without_duplicates(tmp_path):
    out = tmp_path / "composed.jsonl"
    first = compose(out, count=8, size="tiny", seed=1)
    assert first.written == 8
    again = compose(out, count=8, size="tiny", seed=1)
    assert again.written == 0 and again.existing == 8
    more = compose(out, count=12, size="tiny", seed=1)
    tasks = JsonlStore(out, Task).load()
    assert more.written == 4 and len(tasks) == 12
    deduper = Deduper()
    assert all(deduper.add(t.source) for t in tasks)


def test_compose_can_be_restricted_to_crawled_seeds(tmp_path, seeds_path):
    seeds = JsonlStore(seeds_path, Task).load()
    allowed = {s.ops[0] for s in seeds}
    compose(tmp_path / "c.jsonl", count=5, size="tiny", seeds_path=seeds_path)
    for task in JsonlStore(tmp_path / "c.jsonl", Task).load():
        assert set(task.ops) <= allowed
        assert set(task.provenance.parents) <= {s.id for s in seeds}


def test_deduper_ignores_names_constants_and_layout():
    a = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x) * 2\n"
    b = ("import torch\n\nclass Model(torch.nn.Module):\n    # renamed\n    def forward(self, inp):\n"
         "        y = torch.relu(inp) * 3\n        return y\n")
    c = a.replace("relu", "sigmoid")
    deduper = Deduper([a])
    assert not deduper.add(b)
    assert deduper.add(c)

"""crawl: at least 200 torch and 30 transformers seeds, every one runnable on the CPU."""

from __future__ import annotations

import torch

from cuda_agent.data_gen.crawl import crawl, run_seed_once, seed_task
from cuda_agent.data_gen.loader import check_source
from cuda_agent.data_gen.models import Task, TaskKind
from cuda_agent.data_gen.ops import catalog, size_preset
from cuda_agent.data_gen.store import JsonlStore


def test_crawl_counts_meet_the_issue(seeds_report):
    _, report = seeds_report
    assert report.by_library["torch"] >= 200
    assert report.by_library["transformers"] >= 30
    families = {t.family for t in catalog()}
    assert families == {"nn", "functional", "tensor", "transformers"}


def test_every_written_seed_runs_on_cpu(seeds_path):
    seeds = JsonlStore(seeds_path, Task).load()
    torch.set_num_threads(1)
    for seed in seeds:
        check_source(seed.source)
        assert seed.kind is TaskKind.SEED and len(seed.ops) == 1
        run_seed_once(seed.source)  # raises ProblemError if it does not run


def test_seed_ids_are_unique_and_filesystem_safe(seeds_path):
    seeds = JsonlStore(seeds_path, Task).load()
    ids = [s.id for s in seeds]
    assert len(ids) == len(set(ids))
    assert all(s.id.replace("_", "").replace(".", "").replace("-", "").isalnum() for s in seeds)


def test_crawl_is_resumable(tmp_path):
    out = tmp_path / "seeds.jsonl"
    first = crawl(out, libraries=["torch"], size="tiny", check=False)
    second = crawl(out, libraries=["torch"], size="tiny", check=False)
    assert first.written >= 200 and second.written == 0
    assert second.skipped_existing == first.written
    assert len(JsonlStore(out, Task).load()) == first.written


def test_gpu_presets_render_for_every_torch_seed():
    large = size_preset("large")
    rendered = [seed_task(t, large) for t in catalog(["torch"])]
    assert sum(r is not None for r in rendered) >= 200
    for task in filter(None, rendered):
        check_source(task.source)


def test_no_transformers_seed_draws_random_numbers_in_forward(seeds_path):
    """GPT-2 (and any config whose dropout defaults to 0.1) must be built with dropout off."""
    from cuda_agent.data_gen.filter.probes import probe_forward
    from cuda_agent.data_gen.loader import import_source

    torch.set_num_threads(1)
    seeds = [s for s in JsonlStore(seeds_path, Task).load() if s.provenance.library == "transformers"]
    assert any("gpt2" in s.ops[0].lower() for s in seeds)
    offenders = []
    for seed in seeds:
        module = import_source(seed.source)
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        with torch.no_grad():
            _, probe = probe_forward(lambda: model(*inputs), inputs, "cpu")
        if probe.rng_ops or probe.rng_state_changed:
            offenders.append((seed.id, probe.rng_ops))
    assert not offenders

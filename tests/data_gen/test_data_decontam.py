"""decontam and the similarity it rests on: near-copies of KernelBench problems go, the rest stays."""

from __future__ import annotations

import json
import random

import pytest
from dg_helpers import make_task, write_tasks

from cuda_agent.data_gen.decontam import SIMILARITY, decontaminate, load_references
from cuda_agent.data_gen.models import Task
from cuda_agent.data_gen.similarity import Fingerprint, nearest, normalized_hash, similarity
from cuda_agent.data_gen.store import JsonlStore
from cuda_agent.errors import ConfigError

# The level-2 fixture with every identifier renamed, other sizes and constants, comments, a
# different import style and no temporaries: a contaminated task in disguise.
NEAR_COPY = '''
import torch
from torch import nn
import torch.nn.functional as F


class Model(nn.Module):
    """My very own fused layer."""

    def __init__(self, cin, cout, k, groups):
        super().__init__()
        self.c = nn.Conv2d(cin, cout, k)  # the convolution
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, inp):
        return torch.sum(self.gn(F.gelu(self.c(inp))), dim=2)


B = 64
cin, cout, k, groups = 8, 32, 5, 4


def get_inputs():
    return [torch.randn(B, cin, 64, 64)]


def get_init_inputs():
    return [cin, cout, k, groups]
'''

DIFFERENT = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        x = torch.cumsum(x, dim=-1)
        x = self.norm(x)
        x = torch.tanh(x)
        return torch.amax(x, dim=1)


def get_inputs():
    return [torch.randn(32, 128, 256)]


def get_init_inputs():
    return [256]
'''


def test_normal_form_ignores_names_constants_layout_and_aliases(kernelbench_dir):
    original = (kernelbench_dir / "level2" / "1_Conv2d_GELU_GroupNorm_Sum.py").read_text()
    assert similarity(Fingerprint.of(original), Fingerprint.of(NEAR_COPY)) == pytest.approx(1.0)
    assert normalized_hash(original) == normalized_hash(NEAR_COPY)
    assert similarity(Fingerprint.of(original), Fingerprint.of(DIFFERENT)) < 0.9


def test_one_different_operator_is_below_the_threshold():
    base = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    other = base.replace("relu", "sigmoid")
    assert 0.5 < similarity(Fingerprint.of(base), Fingerprint.of(other)) < 0.9


def test_nearest_is_exact():
    rng = random.Random(0)
    ops = ["torch.relu", "torch.tanh", "torch.exp", "torch.sin", "torch.abs", "torch.sigmoid"]
    sources = ["import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
               + "".join(f"        x = {rng.choice(ops)}(x)\n" for _ in range(rng.randint(1, 6))) + "        return x\n"
               for _ in range(40)]
    prints = [Fingerprint.of(s) for s in sources]
    for query in prints[:10]:
        index, best = nearest(query, prints[10:])
        assert best == pytest.approx(max(similarity(query, p) for p in prints[10:]))
        assert similarity(query, prints[10 + index]) == pytest.approx(best)


def test_decontam_removes_the_near_copy_and_keeps_the_rest(tmp_path, kernelbench_dir):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [make_task("copy", NEAR_COPY), make_task("other", DIFFERENT)])
    report = decontaminate(tasks, tmp_path / "out", kernelbench_dir)
    clean = JsonlStore(tmp_path / "out" / "clean.jsonl", Task).load()
    assert [t.id for t in clean] == ["other"]
    assert clean[0].max_similarity is not None and clean[0].max_similarity < 0.9
    assert (report.total, report.kept, report.dropped, report.references) == (2, 1, 1, 4)
    assert report.dropped_examples[0].nearest == "level2/1_Conv2d_GELU_GroupNorm_Sum.py"
    assert sum(b.count for b in report.histogram) == 2
    assert json.loads((tmp_path / "out" / "report.json").read_text())["dropped"] == 1


def test_decontam_resumes_and_re_decides_with_a_new_threshold(tmp_path, kernelbench_dir):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [make_task("copy", NEAR_COPY), make_task("other", DIFFERENT)])
    decontaminate(tasks, tmp_path / "out", kernelbench_dir)
    lines = (tmp_path / "out" / SIMILARITY).read_text().splitlines()
    strict = decontaminate(tasks, tmp_path / "out", kernelbench_dir, threshold=0.0)
    assert (tmp_path / "out" / SIMILARITY).read_text().splitlines() == lines  # nothing recomputed
    assert strict.kept == 0


def test_references_from_a_dataset_file(tmp_path, kernelbench_dir):
    rows = [{"code": p.read_text(), "name": p.stem, "level": 2} for p in sorted(kernelbench_dir.rglob("*.py"))]
    dataset = tmp_path / "kb.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(load_references(dataset)) == 4
    with pytest.raises(ConfigError):
        load_references(tmp_path / "missing")

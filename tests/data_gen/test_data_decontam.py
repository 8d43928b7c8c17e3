"""decontam and the similarity it rests on: near-copies of KernelBench problems go, the rest stays."""

from __future__ import annotations

import json
import random

import pytest
from dg_helpers import make_task, write_tasks

from cuda_agent.data_gen.decontam import SIMILARITY, SimilarityRecord, decontaminate, load_references
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


# A KernelBench-format problem written for these tests, and its copy / rewrite / unrelated twins.
KB_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Matmul, halve, GELU, ReLU6-clamp and a sum over features."""

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.gelu = nn.GELU()

    def forward(self, x):
        x = self.linear(x)
        x = x / 2
        x = self.gelu(x)
        x = torch.clamp(x, min=0.0, max=6.0)
        x = torch.sum(x, dim=1)
        return x


batch_size = 128
in_features = 1024
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

# The same computation spelt differently: functional instead of module forms, a method call,
# x * 0.5 for x / 2, clip for clamp, keywords as positions, torch.rand inputs of other sizes.
KB_REWRITE = '''
import torch
from torch import nn
from torch.nn import functional as fn


class Model(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, inp):
        h = fn.gelu(self.fc(inp) * 0.5)
        return h.clip(0.0, 6.0).sum(1)


def get_inputs():
    return [torch.rand(64, 300) * 2 - 1]


def get_init_inputs():
    return [300, 20]
'''

# Same boilerplate and the same first operator, a different computation.
KB_UNRELATED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.cumsum(x, dim=1)
        x = self.norm(x)
        return torch.amax(torch.tanh(x), dim=1)


def get_inputs():
    return [torch.randn(128, 1024)]


def get_init_inputs():
    return [1024, 512]
'''

# One operator of the chain replaced: a distinct task.
KB_ONE_OP_CHANGED = KB_PROBLEM.replace("self.gelu = nn.GELU()", "self.gelu = nn.Sigmoid()")


def test_semantic_copies_score_high_and_distinct_tasks_low():
    reference = Fingerprint.of(KB_PROBLEM)
    assert similarity(reference, Fingerprint.of(KB_PROBLEM)) == 1.0
    assert similarity(reference, Fingerprint.of(KB_REWRITE)) > 0.95
    assert normalized_hash(KB_PROBLEM) == normalized_hash(KB_REWRITE.replace("(inp) * 0.5", "(inp) / 2"))
    assert similarity(reference, Fingerprint.of(KB_UNRELATED)) < 0.7
    assert similarity(reference, Fingerprint.of(KB_ONE_OP_CHANGED)) < 0.9


@pytest.mark.parametrize(("a", "b"), [
    ("torch.randn(16, 32)", "torch.rand(8, 8, 4)"),
    ("torch.relu(x)", "x.relu()"),
    ("torch.relu(x)", "F.relu(x)"),
    ("x @ w", "torch.matmul(x, w)"),
    ("torch.mm(x, w)", "torch.bmm(x, w)"),
    ("x / 2", "x * 0.5"),
    ("x - 1", "x + 1"),
    ("2 * x", "x * 2"),
    ("torch.sum(x, dim=1)", "x.sum(1)"),
    ("torch.clamp(x, 0, 1)", "torch.clip(x, 0, 1)"),
])
def test_spellings_of_one_operation_share_a_normal_form(a, b):
    def source(expression: str) -> str:
        return ("import torch\nimport torch.nn.functional as F\n\n\nclass Model(torch.nn.Module):\n"
                f"    def forward(self, x, w):\n        return {expression}\n")

    assert normalized_hash(source(a)) == normalized_hash(source(b)), (a, b)


def test_module_form_equals_functional_form():
    module = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n        self.act = nn.LeakyReLU(0.2)\n\n    def forward(self, x):\n"
              "        return self.act(x)\n")
    functional = ("import torch\nimport torch.nn.functional as F\n\n\nclass Model(torch.nn.Module):\n"
                  "    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n"
                  "        return F.leaky_relu(x, 0.2)\n")
    assert normalized_hash(module) == normalized_hash(functional)


def test_copy_and_rewrite_are_dropped_unrelated_kept_and_every_task_reports_its_nearest(tmp_path):
    kernelbench = tmp_path / "KernelBench"
    (kernelbench / "level2").mkdir(parents=True)
    (kernelbench / "level2" / "7_Matmul_Divide_GELU_Clamp_Sum.py").write_text(KB_PROBLEM)
    (kernelbench / "level1").mkdir()
    (kernelbench / "level1" / "19_ReLU.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(16, 16384)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    tasks = write_tasks(tmp_path / "tasks.jsonl", [make_task("copy", KB_PROBLEM), make_task("rewrite", KB_REWRITE),
                                                   make_task("unrelated", KB_UNRELATED),
                                                   make_task("one_op_changed", KB_ONE_OP_CHANGED)])
    report = decontaminate(tasks, tmp_path / "out", kernelbench)
    clean = {t.id: t for t in JsonlStore(tmp_path / "out" / "clean.jsonl", Task).load()}
    assert sorted(clean) == ["one_op_changed", "unrelated"]
    assert all(t.nearest_reference == "level2/7_Matmul_Divide_GELU_Clamp_Sum.py" for t in clean.values())
    assert all(t.max_similarity is not None and 0 < t.max_similarity <= 0.9 for t in clean.values())
    assert {r.task_id for r in report.dropped_examples} == {"copy", "rewrite"}
    assert {r.task_id for r in report.closest_kept} == {"one_op_changed", "unrelated"}
    records = {r.task_id: r for r in JsonlStore(tmp_path / "out" / SIMILARITY, SimilarityRecord).load()}
    assert set(records) == {"copy", "rewrite", "unrelated", "one_op_changed"}
    assert all(r.nearest is not None for r in records.values())


def test_a_changed_reference_set_rescores(tmp_path, kernelbench_dir):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [make_task("t", KB_PROBLEM)])
    first = decontaminate(tasks, tmp_path / "out", kernelbench_dir)
    assert first.kept == 1 and first.recomputed == 0
    other = tmp_path / "kb"
    (other / "level2").mkdir(parents=True)
    (other / "level2" / "1_Problem.py").write_text(KB_PROBLEM)
    second = decontaminate(tasks, tmp_path / "out", other)
    assert (second.kept, second.dropped, second.recomputed) == (0, 1, 1)


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

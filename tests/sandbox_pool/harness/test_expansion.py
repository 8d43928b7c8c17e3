"""The build scans the candidate's lines as its compiler read them (compiler/expansion.py): which lines
are the candidate's, what is found in them, and that the scan is part of every cached object."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness.compiler import build_extension
from cuda_agent.sandbox_pool.harness.compiler.expansion import MEMO_SUFFIX, candidate_lines, violations
from cuda_agent.sandbox_pool.harness.static_check import check_candidate

ROOT = Path(__file__).resolve().parents[3]
KERNEL = (ROOT / "examples/solutions/diag_matmul/cpu_fast/kernels/diag_matmul.cpp").read_text()

PREPROCESSED = """# 0 "kernels/k.cpp"
# 1 "/usr/include/stdc-predef.h" 1 3 4
int PyObject_GetAttrString_in_a_system_header;
# 1 "kernels/k.cpp"
static int a;
# 1 "kernels/../binding_registry.h" 1
struct Registry {{ void attr(); }};
# 4 "kernels/k.cpp" 2

void f() {{ PyObject_GetAttrString(0, "x"); }}
# 1 "{stage}/kernels/helper.cuh" 1
void g() {{ h.attr("y"); }}
# 1 "{stage}/../elsewhere/kernels/x.h" 1
void outside() {{ h.attr("z"); }}
"""


def test_only_the_candidates_lines_are_read_and_numbered_as_its_files(tmp_path: Path) -> None:
    text = PREPROCESSED.format(stage=tmp_path)
    lines = list(candidate_lines(text, tmp_path))
    assert [(path, number) for path, number, _ in lines] == [
        ("kernels/k.cpp", 1), ("kernels/k.cpp", 5), ("kernels/helper.cuh", 1)]
    found = violations(text, tmp_path)
    assert any(v.startswith("kernels/k.cpp:5: `PyObject_") and "after macro expansion" in v
               for v in found), found
    assert any(v.startswith("kernels/helper.cuh:1: `.attr(`") for v in found), found
    assert len(found) == 2  # the system header's, the harness header's and the outside file's are not the candidate's


def test_incbin_assembled_from_string_literals_is_found() -> None:
    text = '# 1 "kernels/k.cpp"\nasm("." "inc" "bin \\"/etc/passwd\\"");\n'
    assert any("incbin" in v for v in violations(text, Path("/nowhere")))


@pytest.mark.parametrize("directive", ['#line 1 "binding_registry.h"', '# 1 "binding_registry.h"', "%:line 3",
                                       '#  \\\n line 1 "x.h"'])
def test_line_directives_are_refused(directive: str) -> None:
    """They would attribute the candidate's own lines to a file the expanded scan does not read."""
    report = check_candidate({"model_new.py": "import torch\n", "kernels/k.cpp": directive + "\n" + KERNEL})
    assert any("line directive" in v for v in report.violations), report.violations


def test_a_cached_object_without_its_scan_is_built_again(tmp_path: Path) -> None:
    """An object cached before the scan existed (or whose memo was lost) is not taken as scanned."""
    files = {"kernels/diag_matmul.cpp": KERNEL}
    first = asyncio.run(build_extension(files, "cpu", cache_dir=tmp_path))
    assert first.ok and first.expanded_violations == [] and first.units_compiled == 2
    (memo,) = [Path(o + MEMO_SUFFIX) for o in first.objects]
    assert memo.exists()
    assert asyncio.run(build_extension(files, "cpu", cache_dir=tmp_path)).units_compiled == 0
    memo.unlink()
    again = asyncio.run(build_extension(files, "cpu", cache_dir=tmp_path))
    assert again.ok and again.units_compiled == 1 and memo.exists()


@pytest.mark.parametrize(("code", "refused"), [
    ("auto y = x.clone();", False), ("auto y = p->clone();", False), ("auto y = torch::clone(x);", False),
    ("clone(fn, stack, CLONE_VM, 0);", True), ("::clone(fn, stack, CLONE_VM, 0);", True),
])
def test_a_tensor_clone_is_not_the_system_call(code: str, refused: bool) -> None:
    """The source rule meant for libc's clone refused honest `x.clone()` in C++ (libc's is refused by symbol too)."""
    report = check_candidate({"model_new.py": "import torch\n", "kernels/k.cpp": code + "\n"})
    assert any("clone" in v for v in report.violations) is refused, report.violations

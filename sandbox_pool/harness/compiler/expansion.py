"""The candidate's sources as its compiler read them, macros expanded, scanned with the source policy.

The static check reads the raw text of kernels/*; a macro can assemble what that check refuses from
parts the text never spells out: `#define A attr` then `handle.A("f")`, or a library's pasting macro,
`C10_CONCATENATE(Py, Object_GetAttrString)`. So every compile of a candidate unit keeps the compiler's
own preprocessed output (g++ `-save-temps=obj`; nvcc `--keep`, which holds both passes of a .cu: device
and host), and the lines that come from the candidate's files are scanned with the same patterns. The
preprocessor's line markers say which file a line comes from; the static check refuses line directives,
so a candidate cannot make its lines look like a header's. Keeping the files costs the compile nothing
measurable (nvcc and g++ preprocess to files anyway, or as fast).

The outcome is kept beside the object in the content-addressed build cache (`<object>.expanded`),
written before the object is published, so a cached object always has it.

Not covered: a candidate macro that changes a library header's own lines (defined before the
`#include`, expanded inside the header) is not scanned here; what such code calls is still subject to
the symbol check.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path

from cuda_agent.errors import InfraError
from cuda_agent.sandbox_pool.harness.static_check import hidden_incbin, source_violations

MEMO_SUFFIX = ".expanded"
_MARKER = re.compile(r'#(?:line)?[ \t]*(\d+)[ \t]+"([^"\n]*)"[^\n]*\n')  # kernels/ names hold no quotes
_NOTE = ", after macro expansion"


def keep_flags(compiler: str, keep: Path) -> list[str]:
    """Flags that make `compiler` leave its preprocessed output in `keep` (the object goes there too)."""
    if Path(compiler).name.startswith("nvcc"):
        return ["--keep", "--keep-dir", str(keep)]
    return ["-save-temps=obj"]


def scan(keep: Path, stage: Path) -> list[str]:
    """Violations in the candidate's lines of every preprocessed file the compile left in `keep`."""
    outputs = sorted(keep.glob("*.ii"))
    if not outputs:  # a toolchain that names its files otherwise must not turn the check off
        raise InfraError(f"the compiler left no preprocessed output (*.ii) in {keep}: the expanded-source "
                         "check cannot run; see sandbox_pool/harness/compiler/expansion.py")
    found: list[str] = []
    for preprocessed in outputs:
        found += violations(preprocessed.read_text(errors="replace"), stage)
    return sorted(set(found))


def violations(preprocessed: str, stage: Path) -> list[str]:
    """Violations of the source policy in the lines of `preprocessed` that come from kernels/."""
    by_file: dict[str, tuple[list[str], list[int]]] = {}
    for path, number, line in candidate_lines(preprocessed, stage):
        lines, numbers = by_file.setdefault(path, ([], []))
        lines.append(line)
        numbers.append(number)
    found: list[str] = []
    for path, (lines, numbers) in sorted(by_file.items()):
        code = "\n".join(lines)
        found += source_violations(path, code, numbers, _NOTE)
        if hidden_incbin(code):
            found.append(f"{path}: `.incbin` is not allowed (reading files{_NOTE})")
    return found


def candidate_lines(preprocessed: str, stage: Path) -> Iterator[tuple[str, int, str]]:
    """(file, line number, text) of each non-blank line of `preprocessed` that the candidate's files gave.

    A unit's output is mostly library headers (15 MB for a .cu that includes torch): only the markers are
    found across it, and only the candidate's stretches are split into lines."""
    root = os.path.realpath(stage)
    text = "\n" + preprocessed  # every line, the first too, follows a newline
    names: dict[str, str | None] = {}
    markers = list(_markers(text))
    for i, marker in enumerate(markers):
        name = marker.group(2)
        if name not in names:
            names[name] = _candidate_file(name, root)
        path = names[name]
        if path is None:
            continue
        end = markers[i + 1].start() if i + 1 < len(markers) else len(text)
        first = int(marker.group(1))
        for offset, line in enumerate(text[marker.end():end].split("\n")):
            if line.strip():
                yield path, first + offset, line


def _markers(text: str) -> Iterator[re.Match[str]]:
    """The line markers of `text`, in order. str.find to each line that starts with `#`: a MULTILINE
    regex over 15 MB takes ~0.3 s, this ~0.05 s."""
    at = text.find("\n#")
    while at >= 0:
        marker = _MARKER.match(text, at + 1)
        if marker is not None:
            yield marker
        at = text.find("\n#", at + 1)


def _candidate_file(name: str, root: str) -> str | None:
    """`name` relative to the build folder when it is one of the candidate's kernels/ files."""
    if name.startswith("/"):
        if not name.startswith(root + "/"):
            return None
        name = name[len(root) + 1:]
    name = posixpath.normpath(name)
    return name if name.startswith("kernels/") else None

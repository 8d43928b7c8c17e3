"""The repository cites only files it contains (issue 37): every upper-case markdown name (README.md) in a
tracked file is a file of the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CITED = re.compile(rb"\b([A-Z][A-Z0-9_]*\.md)\b")


def test_every_cited_markdown_file_is_in_the_repository() -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    paths = [Path(p.decode()) for p in tracked.split(b"\0") if p]
    names = {path.name for path in paths}
    missing: dict[str, list[str]] = {}
    for path in paths:
        full = REPO / path
        if not full.is_file() or full.suffix in {".parquet", ".png", ".so", ".tgz"}:
            continue
        for name in set(CITED.findall(full.read_bytes())):
            cited = name.decode()
            if cited not in names:
                missing.setdefault(cited, []).append(str(path))
    assert not missing, f"files cited but not in the repository: {missing}"

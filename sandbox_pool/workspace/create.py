"""Create workspaces and read candidates out of them."""

from __future__ import annotations

import json
import shutil
import stat
from importlib import resources
from pathlib import Path

from cuda_agent.errors import ConfigError, WorkspaceError
from cuda_agent.sandbox_pool.workspace.layout import (
    CANDIDATE_ENTRY,
    KERNEL_DIR,
    MANIFEST,
    MAX_CANDIDATE_FILE_BYTES,
    MAX_CANDIDATE_FILES,
    PROTECTED_PATHS,
    is_candidate_path,
)

_TEMPLATES = Path(__file__).parent / "templates"

_STARTER_MODEL_NEW = '''"""ModelNew: the same interface as model.py's Model, computed by kernels in cuda_extension.

Write your kernels in kernels/ (see SKILL.md), build them with `bash utils/compile.sh`,
then call them here. Only tensor creation and views may use torch inside forward().
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        raise NotImplementedError("write ModelNew: same constructor arguments as Model")

    def forward(self, *inputs):
        raise NotImplementedError
'''


def _skill_text() -> str:
    try:
        return (resources.files("cuda_agent.recipe") / "SKILL.md").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):  # pragma: no cover - packaging error
        raise WorkspaceError("SKILL.md is missing from cuda_agent.recipe; reinstall the package") from None


def create_workspace(problem_src: str, dest: Path, device: str = "cuda", *, overwrite: bool = False) -> Path:
    """Create a workspace for `problem_src` at `dest` (must not exist unless `overwrite`).

    Protected files are written read-only (mode 0444) as a first line of defence; sandboxes
    additionally mount them read-only.
    """
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"device must be 'cpu' or 'cuda', got {device!r}")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        if not overwrite:
            raise WorkspaceError(f"{dest} exists and is not empty; choose a new directory or pass overwrite=True")
        _make_writable(dest)
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / KERNEL_DIR).mkdir()
    (dest / "model.py").write_text(problem_src, encoding="utf-8")
    (dest / CANDIDATE_ENTRY).write_text(_STARTER_MODEL_NEW, encoding="utf-8")
    (dest / "SKILL.md").write_text(_skill_text(), encoding="utf-8")
    shutil.copy(_TEMPLATES / "binding.cpp", dest / "binding.cpp")
    shutil.copy(_TEMPLATES / "binding_registry.h", dest / "binding_registry.h")
    shutil.copytree(_TEMPLATES / "utils", dest / "utils", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / MANIFEST).write_text(json.dumps({"device": device, "format": 1}) + "\n", encoding="utf-8")
    for name in PROTECTED_PATHS:
        _make_read_only(dest / name)
    return dest


def _make_read_only(path: Path) -> None:
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    for p in paths:
        if p.is_file():
            mode = p.stat().st_mode
            p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _make_writable(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def workspace_device(workspace: Path) -> str:
    """The device recorded when the workspace was created."""
    manifest = Path(workspace) / MANIFEST
    if not manifest.is_file():
        raise WorkspaceError(f"{workspace} is not a workspace (no {MANIFEST}); create one with `cuda-agent init`")
    return json.loads(manifest.read_text(encoding="utf-8"))["device"]


def read_problem(workspace: Path) -> str:
    """The reference source (model.py) of a workspace."""
    path = Path(workspace) / "model.py"
    if not path.is_file():
        raise WorkspaceError(f"{path} not found; is {workspace} a workspace?")
    return path.read_text(encoding="utf-8")


def read_candidate_files(workspace: Path) -> dict[str, str]:
    """The candidate's files: model_new.py and kernels/* (regular files only, no symlinks).

    Files the candidate may not submit (other folders, build outputs) are ignored;
    unreadable or oversized files raise `WorkspaceError` naming the file.
    """
    root = Path(workspace)
    if not root.is_dir():
        raise WorkspaceError(f"workspace {root} does not exist")
    files: dict[str, str] = {}
    entry = root / CANDIDATE_ENTRY
    candidates = [entry] if entry.is_file() else []
    kernels = root / KERNEL_DIR
    if kernels.is_dir():
        candidates += sorted(p for p in kernels.iterdir())
    for path in candidates:
        rel = path.relative_to(root).as_posix()
        if path.is_symlink() or not path.is_file() or not is_candidate_path(rel):
            continue
        if path.stat().st_size > MAX_CANDIDATE_FILE_BYTES:
            raise WorkspaceError(f"{rel} is larger than {MAX_CANDIDATE_FILE_BYTES} bytes")
        try:
            files[rel] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise WorkspaceError(f"{rel} is not UTF-8 text") from exc
        if len(files) > MAX_CANDIDATE_FILES:
            raise WorkspaceError(f"more than {MAX_CANDIDATE_FILES} candidate files")
    return files

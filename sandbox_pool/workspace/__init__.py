"""Workspaces: the directory an agent works in, and how candidates are read from it.

    create_workspace(problem_src, dest, device)  -> Path   (what `cuda-agent init` does)
    read_candidate_files(workspace)              -> dict[str, str]
    read_problem(workspace)                      -> str
    workspace_device(workspace)                  -> "cpu" | "cuda"
"""

from cuda_agent.sandbox_pool.workspace.create import (
    create_workspace,
    read_candidate_files,
    read_problem,
    workspace_device,
)
from cuda_agent.sandbox_pool.workspace.layout import PROTECTED_PATHS, is_candidate_path, is_protected

__all__ = [
    "PROTECTED_PATHS",
    "create_workspace",
    "is_candidate_path",
    "is_protected",
    "read_candidate_files",
    "read_problem",
    "workspace_device",
]

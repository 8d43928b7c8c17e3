"""The private folder of one evaluation's child: its build copy, init file and trial outputs (torch-free:
the one-shot path makes it before its torch import ends, early_child.py)."""

from __future__ import annotations

import os
import tempfile


def new_work_folder() -> str:
    """A private folder for one evaluation's child (its build copy, init file, trial outputs)."""
    return tempfile.mkdtemp(prefix="cuda_agent_eval_", dir=fast_tmp())


def fast_tmp() -> str | None:
    """/dev/shm when it is writable and allows executables (the child maps the .so from there)."""
    shm = "/dev/shm"
    if not (os.path.isdir(shm) and os.access(shm, os.W_OK)):
        return None
    return None if os.statvfs(shm).f_flag & os.ST_NOEXEC else shm

"""The reference problems a sandbox may have the pool run.

A job carries its task's reference (`problem_src`, KernelBench's model.py), and the pool executes
it in its trusted process: the reference model, its draws and outputs are what a candidate is
judged against. A client of the sandbox socket is an agent, so it could send any Python as
"model.py" and run it in the process that computes every reward. That socket therefore runs only
the problems a trusted client registered: the agent loop registers a task's model.py when it
creates the workspace (`grant_sandbox_access`), and every job a trusted client submits registers
its own.
"""

from __future__ import annotations

import hashlib


def problem_digest(problem_src: str) -> str:
    return hashlib.sha256(problem_src.encode()).hexdigest()


class ProblemRegistry:
    """sha256 digests of the reference sources trusted clients registered (a few bytes per task)."""

    def __init__(self) -> None:
        self._known: set[str] = set()

    def register(self, problem_src: str) -> None:
        self._known.add(problem_digest(problem_src))

    def knows(self, problem_src: str) -> bool:
        return problem_digest(problem_src) in self._known

    def __len__(self) -> int:
        return len(self._known)

"""Terminal sandboxes: where an agent's shell commands and file edits run.

One async contract (`TerminalSandbox`, base.py), two backends picked by a config's
`type` (`local`: Linux namespaces; `docker`: one container per sandbox), one factory
(`create_sandbox`) and a warm pool (`WarmPool`, warm_pool.py). Importing this package
loads neither the Docker SDK nor a backend. Usage and isolation model: docs/sandbox.md.
"""

from cuda_agent.sandbox_pool.terminal.base import BackgroundStatus, CommandResult, SandboxLimits, TerminalSandbox
from cuda_agent.sandbox_pool.terminal.config import (
    DEFAULT_PROTECTED,
    DockerSandboxConfig,
    LocalSandboxConfig,
    SandboxConfig,
    create_sandbox,
)

__all__ = [
    "DEFAULT_PROTECTED",
    "BackgroundStatus",
    "CommandResult",
    "DockerSandboxConfig",
    "LocalSandboxConfig",
    "SandboxConfig",
    "SandboxLimits",
    "TerminalSandbox",
    "create_sandbox",
]

"""Give an agent's sandbox the pool: its task's reference registered, the pool's sandbox socket mounted.

A served pool listens on two sockets: its own (`pool.sock`, the owner's: the reward function, the
CLI on the host) and the sandbox socket next to it (`pool.sandbox.sock`), the only one mounted into
sandboxes. On the sandbox socket the pool runs only reference problems registered on its own socket
(`problems.ProblemRegistry`): the pool executes a job's model.py in its trusted process, and an agent
must not choose that code. A ray:// pool is not passed in (sandboxes have no network).
"""

from __future__ import annotations

from pathlib import Path

from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.pool.config import ENV_ADDRESS


def sandbox_socket_path(path: Path | str) -> Path:
    """The sandbox socket served beside the pool's own socket `path` (pool.sock -> pool.sandbox.sock)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.sandbox{path.suffix}")


async def grant_sandbox_access(address: str | None,
                               problem_src: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(read-only mounts, environment) that let a sandbox of `problem_src`'s task reach the pool at `address`.

    Registers the task's reference over the pool's own socket (None: nothing to register), then mounts
    the sandbox socket at its own path and names it in $CUDA_AGENT_POOL. No address, or a ray:// one:
    nothing ({}, {})."""
    from cuda_agent.sandbox_pool.pool.client import PoolClient, socket_path

    if not address or "://" in address and not address.startswith("unix://"):
        return {}, {}
    own = socket_path(address).resolve()
    sandbox = sandbox_socket_path(own)
    if not own.exists():
        raise ConfigError(f"no pool socket at {own} ({ENV_ADDRESS} / --pool); start one with `cuda-agent pool serve` "
                          f"or unset {ENV_ADDRESS}")
    if not sandbox.exists():
        raise ConfigError(f"the pool at {own} serves no sandbox socket ({sandbox}); restart it with this version's "
                          "`cuda-agent pool serve`")
    if problem_src is not None:
        await PoolClient(str(own)).register_problem(problem_src)
    return {str(sandbox): str(sandbox)}, {ENV_ADDRESS: str(sandbox)}

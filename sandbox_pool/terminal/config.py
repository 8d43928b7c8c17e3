"""Configuration of the terminal sandboxes: one pydantic model per backend, picked by `type`.

``create_sandbox(config, workspace)`` is the one factory; it imports the backend only
when it is used (the Docker SDK loads only for ``type: docker``). Example::

    config = TypeAdapter(SandboxConfig).validate_python({"type": "local"})
    async with create_sandbox(config, Path("ws")) as sb:
        result = await sb.run("bash utils/compile.sh")
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.terminal.base import SandboxLimits

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.terminal.base import TerminalSandbox

#: Workspace entries the CUDA task protects (docs/sandbox.md, "Contract"). An entry
#: protects itself and everything below it; a trailing slash only marks a directory.
DEFAULT_PROTECTED: tuple[str, ...] = (
    "SKILL.md",
    "model.py",
    "binding.cpp",
    "binding_registry.h",
    "utils/",
)

#: Where the workspace appears inside every sandbox.
WORKSPACE_MOUNT = "/workspace"


class _CommonConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limits: SandboxLimits = Field(default_factory=SandboxLimits, description="Per-process limits and timeouts.")
    mount_point: str = Field(WORKSPACE_MOUNT, description="Absolute path of the workspace inside the sandbox.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment of every command.")
    compile_cache: str | None = Field(
        "auto", description="Host folder of the evaluation pool's compile cache, mounted read-only at the same "
        "path: compile.sh copies the module the pool built from it; only the pool (trusted side) writes it, so "
        "no candidate can poison another's build. 'auto': $CUDA_AGENT_CACHE/build, else "
        "~/.cache/cuda_agent/build (created if missing); None: not mounted.")

    def compile_cache_mounts(self) -> dict[str, str]:
        """{host folder: same path} for the shared compile cache, or {} (see `compile_cache`)."""
        return shared_cache_mounts(self.compile_cache)


class LocalSandboxConfig(_CommonConfig):
    """The embedded default: Linux namespaces through bubblewrap (or unshare), no daemon."""

    type: Literal["local"] = "local"
    launcher: Literal["auto", "bwrap", "unshare"] = Field(
        "auto", description="auto: bubblewrap if it works here, else unshare(1)."
    )
    sandbox_uid: int | None = Field(
        None,
        description="Host uid commands run as when the caller is root (None: a fresh uid per sandbox, "
        "so RLIMIT_NPROC counts only its processes). Ignored for non-root callers (they keep their uid).",
    )
    host_ro_paths: list[str] = Field(
        default_factory=lambda: ["/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64"],
        description="Host paths visible read-only at the same place (symlinks are recreated as symlinks).",
    )
    mount_python: bool = Field(
        True, description="Bind this interpreter, its virtual environment and cuda_agent's sources read-only."
    )
    state_dir: str | None = Field(
        None, description="Host folder for the sandbox's private /tmp and command output (None: the system temp)."
    )
    shm_size_mb: int = Field(256, description="Size of /dev/shm (tmpfs: counts against host memory).")


class DockerSandboxConfig(_CommonConfig):
    """One container per sandbox through the Docker SDK, ``network_mode="none"``."""

    type: Literal["docker"] = "docker"
    image: str = Field("cuda-agent-compile:latest", description="Image with bash, coreutils and util-linux.")
    engine_url: str | None = Field(None, description="Docker engine URL (None: DOCKER_HOST or the local socket).")
    host_mounts: dict[str, str] = Field(
        default_factory=dict,
        description="Host path -> container path, read-only (the test image takes the host's /usr and venv).",
    )
    cpus: float = Field(2.0, description="CPU quota of the container (cores).")
    container_memory_mb: int | None = Field(
        None, description="Memory (cgroup) of the whole container, no swap; None: limits.memory_mb."
    )
    tmp_size_mb: int = Field(1024, description="Size of the container's private /tmp (tmpfs, counts as memory).")
    user: str | None = Field(
        None, description="uid:gid of commands (None: root without capabilities for a root caller, else the caller's)."
    )
    name_prefix: str = Field("cuda-agent-sb", description="Prefix of container names (cleanup, monitoring).")
    start_timeout_s: float = Field(60.0, description="Limit on creating and starting the container.")
    state_dir: str | None = Field(None, description="Host folder for command output (None: the system temp).")


SandboxConfig = Annotated[Union[LocalSandboxConfig, DockerSandboxConfig], Field(discriminator="type")]


def shared_cache_mounts(setting: str | None) -> dict[str, str]:
    """The read-only mount of the compile cache for `setting` ('auto', a folder, or None)."""
    import os

    if setting is None:
        return {}
    if setting == "auto":
        root = Path(os.environ.get("CUDA_AGENT_CACHE") or Path.home() / ".cache" / "cuda_agent") / "build"
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError:
            return {}
    else:
        root = Path(setting)
        if not root.is_dir():
            raise ConfigError(f"compile_cache {setting!r} is not a folder; pass an existing folder, 'auto' or null")
    path = str(root.resolve())
    return {path: path}


def create_sandbox(
    config: LocalSandboxConfig | DockerSandboxConfig,
    workspace: Path | None,
    *,
    protected: list[str] | None = None,
    extra_ro_mounts: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> TerminalSandbox:
    """Build (not start) the sandbox `config` describes around `workspace`.

    `protected`: workspace-relative paths read-only inside and refused by `write_file`
    (default `DEFAULT_PROTECTED`). `extra_ro_mounts`: host path -> sandbox path, read-only
    (e.g. the evaluation pool's unix socket). `env`: added to `config.env`. A `workspace`
    of None gives an unbound sandbox for warm pools (`start()`, then `bind(workspace)`).
    """
    options = dict(
        protected=list(DEFAULT_PROTECTED if protected is None else protected),
        extra_ro_mounts=dict(extra_ro_mounts or {}),
        env={**config.env, **(env or {})},
    )
    workspace = None if workspace is None else Path(workspace)
    if isinstance(config, LocalSandboxConfig):
        from cuda_agent.sandbox_pool.terminal.local import LocalSandbox

        return LocalSandbox(config, workspace, **options)
    if isinstance(config, DockerSandboxConfig):
        from cuda_agent.sandbox_pool.terminal.docker import DockerSandbox

        return DockerSandbox(config, workspace, **options)
    raise ConfigError(f"unknown sandbox config {type(config).__name__}; use type 'local' or 'docker'")

"""Agent tools: Bash, BashOutput, KillBash, Read, Write, Edit, MultiEdit, Glob, Grep, TodoWrite.

Claude Code's argument names, paths relative to the workspace root, acting on one
trajectory's `TerminalSandbox` (cuda_agent.sandbox_pool.terminal.base). Generic: any
task with a sandbox can use them; the CUDA defaults are only `ToolsConfig.protected_paths`.

Framework-neutral core (what our agent loop uses)::

    from cuda_agent.tools import ToolSession, ToolsConfig, call_tool, tool_schemas

    session = ToolSession(sandbox, ToolsConfig())          # one per trajectory
    prompt_tools = tool_schemas()                          # OpenAI function schemas, `items` kept
    obs = await call_tool(session, name, arguments)        # arguments: JSON text or dict
    obs.text, obs.is_error, obs.error, obs.metrics         # ToolObservation
    await session.close()                                  # kills its background jobs
    await sandbox.close()                                  # the owner closes its sandbox

`call_tool` never raises for the model's mistakes (unknown tool, malformed JSON, missing,
extra or mistyped arguments, paths outside the workspace, protected files, binary or huge
files, Edit with zero or several matches, unknown job ids...): each becomes an
observation with `is_error=True`, a `ToolErrorKind` and a message saying how to fix the
call. It raises only for infrastructure failures (e.g. `SandboxError`).

veRL (`actor_rollout_ref.rollout.multi_turn.tool_config_path=` the file at
`cuda_agent.tools.config.TOOLS_YAML`): the `BaseTool` adapters in `cuda_agent.tools.verl_tools` find the
trajectory's session in the process-wide registry `cuda_agent.tools.sessions`
(`bind(trajectory_id, sandbox)` / `get` / `unbind`, keyed by veRL's `agent_data.request_id`),
or create one on first use from the row's `tools_kwargs` and reap it when idle; see that
module's docstring. This package does not import veRL; `verl_tools` does.

Design choices: Grep is Python `re` over files read through the sandbox (same semantics on
every backend, no dependency on grep/rg inside the sandbox); Glob and Grep's `glob` share
one matcher (`**`, `*`, `?`, `[..]`, `{a,b}`); Read refuses binary files and files over
`read_max_file_bytes`, and pages long files; Bash timeouts are milliseconds, capped at
`bash_max_timeout_ms`; observations are cut in the middle at `max_output_chars`.
"""

from cuda_agent.tools.args import TodoItem
from cuda_agent.tools.dispatch import call_tool
from cuda_agent.tools.observation import ToolErrorKind, ToolObservation
from cuda_agent.tools.registry import tool_names
from cuda_agent.tools.schemas import tool_schemas
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.settings import CUDA_PROTECTED_PATHS, ToolsConfig

__all__ = [
    "CUDA_PROTECTED_PATHS",
    "TodoItem",
    "ToolErrorKind",
    "ToolObservation",
    "ToolSession",
    "ToolsConfig",
    "call_tool",
    "tool_names",
    "tool_schemas",
]

"""The exception tree of cuda_agent.

Every error we raise derives from `CudaAgentError`; where a built-in fits, the error
also derives from it so callers can catch either::

    CudaAgentError
    ├── ConfigError (ValueError)             bad option, bad config file, unknown backend
    ├── ProblemError (ValueError)            a reference problem (model.py) that cannot be loaded
    ├── WorkspaceError (ValueError)          a missing / malformed workspace directory
    ├── InfraError (RuntimeError)            the evaluator's own machinery failed; never the candidate's fault
    │   ├── WorkerCrashedError               a trusted worker died
    │   └── DeviceMemoryError                a device ran out of memory outside the candidate's code
    ├── SandboxError (RuntimeError)          a terminal sandbox could not be created or used
    │   ├── SandboxTimeoutError (TimeoutError)
    │   └── SandboxUnavailableError          the backend (bwrap, docker engine) is not usable here
    ├── PoolError (RuntimeError)             the evaluation pool refused or lost a job
    │   ├── PoolTimeoutError (TimeoutError)
    │   ├── PoolOverloadedError              back-pressure: the queue is full
    │   └── PoolUnreachableError (ConnectionError)
    └── ToolCallError (ValueError)           a model's tool call that cannot run (becomes an observation)
        ├── ToolUsageError                   ... carrying a ToolErrorKind (cuda_agent.tools.observation)
        ├── WorkspaceFileNotFoundError (FileNotFoundError)   (cuda_agent.sandbox_pool.terminal.files)
        └── WorkspaceIsADirectoryError (IsADirectoryError)   (cuda_agent.sandbox_pool.terminal.files)

Three kinds of failure, three mechanisms: our bug or a misconfiguration
raises one of these with the fix in the message; the model's mistake inside a trajectory
becomes an observation; a kernel's outcome (compile error, wrong output, crash, ...) is an
`EvalResult` with a status, never an exception.
"""

from __future__ import annotations


class CudaAgentError(Exception):
    """Root of every error raised by cuda_agent."""


class ConfigError(CudaAgentError, ValueError):
    """A configuration value or command-line option is invalid."""


class ProblemError(CudaAgentError, ValueError):
    """A reference problem cannot be loaded (no `Model`, no `get_inputs`, ...)."""


class WorkspaceError(CudaAgentError, ValueError):
    """A workspace directory is missing, incomplete or malformed."""


class InfraError(CudaAgentError, RuntimeError):
    """The evaluator's own machinery failed (dead worker, full disk, broken toolchain).

    Never the candidate's fault: results carrying it are excluded from training, never
    scored -1.
    """


class WorkerCrashedError(InfraError):
    """A trusted evaluation worker died while holding a job."""


class DeviceMemoryError(InfraError):
    """A device ran out of memory outside the candidate's code (the problem's inputs drawn in an evaluation child,
    the reference's preparation). While other evaluations share the device, the evaluator waits for memory and
    tries again; alone, the job fails with it (``infra_error``): the task needs more than the device has free."""


class SandboxError(CudaAgentError, RuntimeError):
    """A terminal sandbox could not be created or used."""


class SandboxTimeoutError(SandboxError, TimeoutError):
    """A sandbox operation exceeded its time limit."""


class SandboxUnavailableError(SandboxError):
    """The sandbox backend is not usable on this machine (no bwrap, no docker engine)."""


class PoolError(CudaAgentError, RuntimeError):
    """The evaluation pool refused or lost a job."""


class PoolTimeoutError(PoolError, TimeoutError):
    """A job did not finish within its deadline."""


class PoolOverloadedError(PoolError):
    """The pool's queue is full (back-pressure); retry later."""


class PoolUnreachableError(PoolError, ConnectionError):
    """No pool answers at the given address."""


class ToolCallError(CudaAgentError, ValueError):
    """A tool call that cannot run; its message is shown to the model as an observation."""

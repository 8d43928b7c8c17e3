"""The wire format of the pool: one JSON object per line, a request then its response.

Shared by the unix-socket server and the Ray dispatcher, so every remote backend answers
the same way and errors keep their type across the wire::

    -> {"op": "submit", "job": {EvalJob}, "priority": 0, "timeout_s": null}
    <- {"ok": true, "result": {EvalResult}}
    -> {"op": "status"}
    <- {"ok": true, "status": {PoolStatus}}
    -> {"op": "compile", "job": {EvalJob}}              the agent's compile.sh (agent_requests.py)
    <- {"ok": true, "build": {CompileReply}}
    -> {"op": "reference_profile", "job": {EvalJob}}    SKILL.md's first step, cached per task
    <- {"ok": true, "profile": {ReferenceProfile}}
    -> {"op": "register", "problem_src": "..."}          the pool's own socket only (sandbox_access.py)
    <- {"ok": true}
    <- {"ok": false, "error": {"type": "PoolOverloadedError", "message": "..."}}
"""

from __future__ import annotations

import logging
from typing import Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cuda_agent import errors
from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult
from cuda_agent.sandbox_pool.pool.agent_requests import CompileReply, ReferenceProfile
from cuda_agent.sandbox_pool.pool.base import Pool, PoolStatus
from cuda_agent.sandbox_pool.pool.problems import ProblemRegistry

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest request or response line (a job carries its sources)."""

_WIRE_ERRORS: dict[str, type[errors.CudaAgentError]] = {
    cls.__name__: cls
    for cls in (errors.PoolError, errors.PoolTimeoutError, errors.PoolOverloadedError, errors.PoolUnreachableError,
                errors.InfraError, errors.WorkerCrashedError, errors.ConfigError, errors.ProblemError)
}


class PoolRequest(BaseModel):
    """One request to a pool."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["submit", "status", "compile", "reference_profile", "register"] = Field(description="What to do.")
    job: EvalJob | None = Field(None, description="The job (submit, compile, reference_profile).")
    problem_src: str | None = Field(None, description="A task's reference model.py that the pool's sandbox socket "
                                    "may run from now on (register).")
    priority: int = Field(0, description="Higher is served first.")
    timeout_s: float | None = Field(None, gt=0, description="Deadline of the job; None = the pool's default.")


class WireError(BaseModel):
    """An error raised by the pool, by the name of its class in cuda_agent.errors."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="Class name, e.g. 'PoolOverloadedError'.")
    message: str = Field(description="Its message.")


class PoolResponse(BaseModel):
    """The answer to one request."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = Field(description="False when `error` is set.")
    result: EvalResult | None = Field(None, description="The evaluation (submit).")
    status: PoolStatus | None = Field(None, description="The pool's metrics (status).")
    build: CompileReply | None = Field(None, description="The build (compile).")
    profile: ReferenceProfile | None = Field(None, description="The reference's profile (reference_profile).")
    error: WireError | None = Field(None, description="Why the request failed.")


def error_response(exc: BaseException) -> PoolResponse:
    name = type(exc).__name__ if type(exc).__name__ in _WIRE_ERRORS else "PoolError"
    return PoolResponse(ok=False, error=WireError(type=name, message=str(exc) or name))


def raise_wire_error(error: WireError | None) -> NoReturn:
    """Re-raise a pool error received over the wire as its own class."""
    if error is None:
        raise errors.PoolError("the pool answered ok=false without an error")
    raise _WIRE_ERRORS.get(error.type, errors.PoolError)(error.message)


def untrusted_refusal(request: PoolRequest, registry: ProblemRegistry) -> str | None:
    """Why an untrusted client (an agent's sandbox) may not make `request`, or None.

    Refused: a reference problem no trusted client registered (the pool executes model.py in its
    trusted process, where every reward is computed); registering; a priority (sandboxes are served in
    turn); a job that measures its task's baselines again (re-measuring until a noisy or loaded, slow
    baseline is cached would inflate every speed-up of the task)."""
    if request.op == "register":
        return ("only the pool's own socket registers reference problems, not the sandbox socket (the agent loop "
                "registers a task's model.py when it creates the workspace)")
    if request.priority != 0:
        return "requests through the sandbox socket are served in turn: priority must be 0"
    if request.job is not None and not registry.knows(request.job.problem_src):
        return ("this pool runs, for sandboxes, only the reference problems registered on its own socket (a task's "
                "model.py as its workspace was created): model.py differs from the task's, or the task was not "
                "registered (the agent loop and `cuda-agent sandbox exec --pool` register it)")
    if request.job is not None and request.job.options.refresh_baselines:
        return ("this pool does not measure baselines again on a client's request: whoever can reach its socket "
                "(every agent sandbox it is mounted into) could re-measure until a slow baseline is cached and "
                "inflate every speed-up of the task. Ask through the pool's own socket (outside the sandbox) or "
                "serve it with `cuda-agent pool serve --trust-clients` if only you can reach it.")
    return None


async def handle_request(pool: Pool, raw: str | bytes, *, trusted: bool = True,
                         registry: ProblemRegistry | None = None) -> PoolResponse:
    """Answer one request line with `pool`; never raises for a bad request or a pool error.

    `trusted=False` (the sandbox socket): requests `untrusted_refusal` names are refused before the
    pool sees them. A trusted request registers its job's reference in `registry` (and `register`
    requests theirs), for the sandbox socket that shares it."""
    try:
        request = PoolRequest.model_validate_json(raw)
    except ValidationError as exc:
        return error_response(errors.ConfigError(f"malformed pool request: {exc}"))
    refusal = None if trusted else untrusted_refusal(request, registry or ProblemRegistry())
    if refusal is not None:
        return error_response(errors.ConfigError(refusal))
    if request.op == "register":
        if request.problem_src is None:
            return error_response(errors.ConfigError("a register request needs a problem_src"))
        if registry is not None:
            registry.register(request.problem_src)
        return PoolResponse(ok=True)
    if trusted and registry is not None and request.job is not None:
        registry.register(request.job.problem_src)
    try:
        if request.op == "status":
            return PoolResponse(ok=True, status=await pool.status())
        if request.job is None:
            return error_response(errors.ConfigError(f"a {request.op} request needs a job"))
        if request.op == "compile":
            return PoolResponse(ok=True, build=await pool.compile(request.job))
        if request.op == "reference_profile":
            return PoolResponse(ok=True, profile=await pool.reference_profile(request.job))
        result = await pool.evaluate(request.job, priority=request.priority, timeout_s=request.timeout_s)
        return PoolResponse(ok=True, result=result)
    except errors.CudaAgentError as exc:
        return error_response(exc)
    except Exception as exc:  # a pool bug: log it loudly here, report it as lost to the caller
        logger.exception("the pool failed on a %s request", request.op)
        return error_response(errors.PoolError(f"the pool failed: {type(exc).__name__}: {exc}"))


def response_line(response: PoolResponse) -> bytes:
    return response.model_dump_json().encode() + b"\n"

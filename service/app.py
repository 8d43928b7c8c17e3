"""The FastAPI application of the reward service (routes, auth, limits, errors).

Every answer carries ``X-Request-ID`` (the client's, or a new one). Errors are
``{"error", "message", "request_id"}`` with 400 (malformed or invalid request), 401 (no or
wrong token), 404/405, 413 (body or batch too large), 503 + Retry-After (too many evaluations
in flight, or the pool is full or unreachable) and 500 (our bug; logged). A candidate's
failure is never an HTTP error: it is a result with a status.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from cuda_agent.errors import (
    ConfigError,
    InfraError,
    PoolError,
    PoolOverloadedError,
    PoolUnreachableError,
)
from cuda_agent.reward_fns.evaluation import infra_failure_result
from cuda_agent.reward_fns.info import RewardInfo
from cuda_agent.reward_fns.options import RewardOptions
from cuda_agent.reward_fns.scoring import build_job, no_answer_result, reward_info
from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult
from cuda_agent.sandbox_pool.pool.base import Pool
from cuda_agent.service.admission import Admission, TooLargeError, read_limited
from cuda_agent.service.config import ServiceConfig
from cuda_agent.service.metrics import ServiceMetrics
from cuda_agent.service.models import EvaluateRequest, EvaluateResponse, RewardRequest, RewardResponse
from cuda_agent.service.queries import parse_query
from cuda_agent.service.tasks import TaskTable

logger = logging.getLogger(__name__)

OPEN_ROUTES = frozenset({"/health"})
"""Routes answered without a token (load balancers, liveness probes)."""


class BadRequestError(ValueError):
    """A request the service cannot act on; the message says what to change."""


class RewardService:
    """The state behind the routes: config, pool, tasks, limits, metrics."""

    def __init__(self, config: ServiceConfig, pool: Pool, tasks: TaskTable) -> None:
        self.config = config
        self.pool = pool
        self.tasks = tasks
        self.admission = Admission(config.max_in_flight)
        self.metrics = ServiceMetrics()
        self.options = RewardOptions(kind=config.reward_kind, margin=config.margin, device=config.device,
                                     eval_timeout_s=config.eval_timeout_s)

    # --- evaluation -------------------------------------------------------------------------------

    async def evaluate(self, job: EvalJob, priority: int = 0) -> EvalResult:
        """One job in the pool; the pool's own failures become an infra_error result, except back-pressure
        and an unreachable pool, which refuse the whole request (503)."""
        started = time.monotonic()
        self.metrics.in_flight += 1
        try:
            result = await self.pool.evaluate(job, priority=priority, timeout_s=self.config.eval_timeout_s)
        except (PoolOverloadedError, PoolUnreachableError):
            raise
        except (InfraError, PoolError, TimeoutError) as exc:
            logger.warning("evaluation of %s failed in the infrastructure: %r", job.task_id, exc)
            result = infra_failure_result(job, exc)
        finally:
            self.metrics.in_flight -= 1
        if result.wall_s is None:
            result = result.model_copy(update={"wall_s": time.monotonic() - started})
        self.metrics.count_evaluation(result.status.value, result.wall_s)
        return result

    async def evaluate_all(self, jobs: list[EvalJob], priority: int = 0) -> list[EvalResult]:
        """Every job at once under the in-flight limit; the first refusal cancels the rest."""
        with self.admission.admit(len(jobs)):
            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(self.evaluate(job, priority)) for job in jobs]
            except ExceptionGroup as failed:  # the first failure, not the group wrapping it
                raise failed.exceptions[0] from None
        return [task.result() for task in tasks]

    # --- routes -----------------------------------------------------------------------------------

    async def get_reward(self, body: Any) -> dict[str, Any]:
        request = _validate(RewardRequest, body)
        count = len(request.query)
        if count == 0:
            raise BadRequestError("'query' is empty; send at least one sample")
        self._check_batch(count)
        if len(request.labels) != count:
            raise BadRequestError(f"'labels' has {len(request.labels)} entries for {count} queries; send one "
                                  "label (task id) per query (OpenRLHF: --data.label_key)")
        if request.prompts is not None and len(request.prompts) != count:
            raise BadRequestError(f"'prompts' has {len(request.prompts)} entries for {count} queries")
        tasks = []
        for index, label in enumerate(request.labels):
            try:
                tasks.append(self.tasks.resolve(label))
            except ConfigError as exc:
                raise BadRequestError(f"labels[{index}]: {exc}") from None
        prompts = request.prompts or [None] * count
        parsed = [parse_query(query, prompt) for query, prompt in zip(request.query, prompts)]
        jobs = [build_job(answer.files, task, self.options) if "model_new.py" in answer.files else None
                for (answer, _), task in zip(parsed, tasks)]
        real = [job for job in jobs if job is not None]
        results = iter(await self.evaluate_all(real))
        infos = []
        for job, task, (answer, _) in zip(jobs, tasks, parsed):
            result = next(results) if job is not None else no_answer_result(
                task, "no model_new.py block in the answer" + (f" ({'; '.join(answer.ignored)})" if answer.ignored
                                                                else ""))
            if job is None:
                self.metrics.count_evaluation(result.status.value, None)
            infos.append(reward_info(result, self.options, task.task_id))
        return _reward_response(infos, [found for _, found in parsed], [len(a.files) for a, _ in parsed])

    async def evaluate_route(self, body: Any) -> dict[str, Any]:
        if isinstance(body, dict) and "jobs" not in body:
            body = {"jobs": [body]}  # a bare job: a batch of one
        if isinstance(body, dict) and isinstance(body.get("jobs"), list):
            for job in body["jobs"]:
                if isinstance(job, dict):
                    job.setdefault("device", self.config.device)
        request = _validate(EvaluateRequest, body)
        if not request.jobs:
            raise BadRequestError("'jobs' is empty; send at least one job")
        self._check_batch(len(request.jobs))
        for index, job in enumerate(request.jobs):
            if job.device != self.config.device:
                raise BadRequestError(f"jobs[{index}].device is {job.device!r} but this service evaluates on "
                                      f"{self.config.device!r}; omit device or send it to a {job.device} service")
        results = await self.evaluate_all(request.jobs, request.priority)
        return EvaluateResponse(results=results).model_dump(mode="json")

    async def health(self) -> tuple[int, dict[str, Any]]:
        info: dict[str, Any] = {"device": self.config.device, "tasks": len(self.tasks),
                                "evaluations_in_flight": self.admission.in_flight,
                                "max_in_flight": self.config.max_in_flight}
        try:
            async with asyncio.timeout(10):
                status = await self.pool.status()
        except (PoolError, InfraError, TimeoutError, OSError) as exc:
            return 503, {"status": "unavailable", "message": f"the evaluation pool does not answer: {exc}", **info}
        return 200, {"status": "ok", "pool": {"backend": status.backend, "address": status.address,
                                              "workers": len(status.workers), "queue_depth": status.queue_depth},
                     **info}

    async def metrics_snapshot(self) -> dict[str, Any] | None:
        try:
            async with asyncio.timeout(5):
                return (await self.pool.status()).model_dump(mode="json", exclude={"workers"})
        except (PoolError, InfraError, TimeoutError, OSError):
            return None

    def _check_batch(self, count: int) -> None:
        if count > self.config.max_batch:
            raise TooLargeError(f"{count} samples in one request exceed the limit of {self.config.max_batch}; "
                                "split the batch")


def _validate(model: type, body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        from cuda_agent.cli.contract import validation_message

        raise BadRequestError(f"invalid {model.__name__}: {validation_message(exc)}") from None


_LOGGED_NUMBERS = ("infra_failure", "compiled", "correct", "violation", "speedup_vs_eager", "speedup_vs_compile",
                   "runtime_us", "eval_wall_s")


def _reward_response(infos: list[RewardInfo], prompt_found: list[bool], files: list[int]) -> dict[str, Any]:
    """OpenRLHF's answer: numbers only in extra_logs (each becomes a tensor); None becomes 0."""
    extra_logs: dict[str, list[float]] = {
        key: [float(getattr(info, key) or 0) for info in infos] for key in _LOGGED_NUMBERS}
    extra_logs["prompt_found"] = [float(found) for found in prompt_found]
    extra_logs["answer_files"] = [float(n) for n in files]
    scores = [info.score for info in infos]
    return RewardResponse(rewards=scores, scores=scores, extra_logs=extra_logs,
                          infos=[info.to_extra_info() for info in infos]).model_dump(mode="json")


# --- the application -------------------------------------------------------------------------------


def create_app(service: RewardService, *, manage_pool: bool = True) -> FastAPI:
    """The ASGI app; with `manage_pool` it starts the pool at startup and closes it at shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if manage_pool:
            async with service.pool:
                yield
        else:
            yield

    app = FastAPI(title="cuda-agent reward service", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json")
    app.state.service = service
    config = service.config

    @app.middleware("http")
    async def envelope(request: Request, call_next: Any) -> Response:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        request.state.request_id = request_id
        started = time.monotonic()
        if config.token and request.url.path not in OPEN_ROUTES and not _authorized(request, config.token):
            response: Response = _error(401, "unauthorized", "missing or wrong token: send 'Authorization: Bearer "
                                        "TOKEN' (or ?token=TOKEN in the URL)", request_id)
            response.headers["WWW-Authenticate"] = "Bearer"
        else:
            try:
                response = await call_next(request)
            except Exception as exc:  # our bug: logged with its traceback, answered 500 with the request id
                logger.exception("request %s failed", request_id)
                response = _error(500, "internal", f"internal error ({type(exc).__name__}); see the service log "
                                  f"for request {request_id}", request_id)
        response.headers["X-Request-ID"] = request_id
        service.metrics.count_request(request.url.path if request.url.path in _ROUTES else "other",
                                      response.status_code, time.monotonic() - started)
        return response

    async def body_of(request: Request) -> Any:
        if "json" not in request.headers.get("content-type", "application/json"):
            raise BadRequestError(f"content type {request.headers.get('content-type')!r}: send application/json")
        raw = await read_limited(request.stream(), request.headers.get("content-length"), config.max_body_bytes)
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequestError(f"the body is not JSON ({exc}); send a JSON object") from None

    @app.post("/get_reward")
    async def get_reward(request: Request) -> JSONResponse:
        """OpenRLHF's remote reward: {"query", "prompts", "labels"} in, {"rewards", "scores", "extra_logs"} out."""
        return JSONResponse(await service.get_reward(await body_of(request)))

    @app.post("/v1/evaluate")
    async def evaluate(request: Request) -> JSONResponse:
        """One job or {"jobs": [...]} in, {"results": [EvalResult, ...]} out (timing receipt included)."""
        return JSONResponse(await service.evaluate_route(await body_of(request)))

    @app.get("/health")
    async def health() -> JSONResponse:
        code, body = await service.health()
        return JSONResponse(body, status_code=code)

    @app.get("/metrics")
    async def metrics(request: Request, format: str = "prometheus") -> Response:  # noqa: A002 - the query name
        pool = await service.metrics_snapshot()
        if format == "json" or "application/json" in request.headers.get("accept", ""):
            return JSONResponse(service.metrics.snapshot(pool))
        return PlainTextResponse(service.metrics.prometheus(pool), media_type="text/plain; version=0.0.4")

    _install_error_handlers(app, config.retry_after_s)
    return app


_ROUTES = frozenset({"/get_reward", "/v1/evaluate", "/health", "/metrics"})


def _authorized(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    offered = header[7:].strip() if header.lower().startswith("bearer ") else request.query_params.get("token", "")
    return bool(offered) and hmac.compare_digest(offered.encode(), token.encode())


def _error(code: int, kind: str, message: str, request_id: str, retry_after: int | None = None) -> JSONResponse:
    from cuda_agent.cli.contract import one_line

    headers = {"Retry-After": str(retry_after)} if retry_after else None
    return JSONResponse({"error": kind, "message": one_line(message), "request_id": request_id},
                        status_code=code, headers=headers)


def _install_error_handlers(app: FastAPI, retry_after_s: int) -> None:
    def rid(request: Request) -> str:
        return getattr(request.state, "request_id", "")

    @app.exception_handler(BadRequestError)
    async def bad_request(request: Request, exc: BadRequestError) -> JSONResponse:
        return _error(400, "bad_request", str(exc), rid(request))

    @app.exception_handler(TooLargeError)
    async def too_large(request: Request, exc: TooLargeError) -> JSONResponse:
        return _error(413, "too_large", str(exc), rid(request))

    @app.exception_handler(PoolOverloadedError)
    async def overloaded(request: Request, exc: PoolOverloadedError) -> JSONResponse:
        return _error(503, "overloaded", f"{exc}", rid(request), retry_after_s)

    @app.exception_handler(PoolUnreachableError)
    async def unreachable(request: Request, exc: PoolUnreachableError) -> JSONResponse:
        return _error(503, "pool_unreachable", f"{exc}", rid(request), retry_after_s)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = f"{exc.detail}: {request.method} {request.url.path}; routes: POST /get_reward, POST /v1/evaluate, " \
                  "GET /health, GET /metrics"
        return _error(exc.status_code, kind, message, rid(request))

"""The reward as an HTTP service: ``cuda-agent serve-reward`` (docs/service.md).

Any trainer reaches the trusted evaluator over HTTP: OpenRLHF's remote reward
(``POST /get_reward``), plain JSON evaluations (``POST /v1/evaluate``), ``GET /health`` and
``GET /metrics``. Evaluations run in the evaluation pool (a served one, or one embedded in
the service). FastAPI and uvicorn are imported only here (the ``service`` extra).

    config.py    ServiceConfig: bind address, limits, token, pool
    tasks.py     TaskTable: the tasks of a veRL parquet dataset, by label
    models.py    the wire models (requests, answers, errors)
    admission.py the concurrency limit (jobs in flight) and request-size limit
    metrics.py   counters and latency windows, Prometheus text or JSON
    app.py       the FastAPI application
    cli.py       the ``serve-reward`` command
"""

TOKEN_ENV = "CUDA_AGENT_REWARD_TOKEN"
"""Default environment variable holding the service's bearer token."""

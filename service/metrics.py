"""Counters of the reward service, rendered as Prometheus text or JSON (``GET /metrics``)."""

from __future__ import annotations

import collections
import statistics
import time
from typing import Any


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation; None without values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[min(998, max(0, round(q * 1000) - 1))]


class ServiceMetrics:
    """Requests by route and status code, evaluations by verdict, latency windows."""

    def __init__(self, window: int = 4096) -> None:
        self.started = time.time()
        self.requests: collections.Counter[tuple[str, int]] = collections.Counter()
        self.evaluations: collections.Counter[str] = collections.Counter()
        self.in_flight = 0
        self.request_s: collections.deque[float] = collections.deque(maxlen=window)
        self.evaluator_s: collections.deque[float] = collections.deque(maxlen=window)

    def count_request(self, route: str, code: int, seconds: float) -> None:
        self.requests[(route, code)] += 1
        if code == 200:
            self.request_s.append(seconds)

    def count_evaluation(self, status: str, evaluator_s: float | None) -> None:
        self.evaluations[status] += 1
        if evaluator_s is not None:
            self.evaluator_s.append(evaluator_s)

    def snapshot(self, pool: dict[str, Any] | None = None) -> dict[str, Any]:
        """Everything as one JSON-able object."""
        request_s, evaluator_s = list(self.request_s), list(self.evaluator_s)
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "requests": [{"route": r, "code": c, "count": n} for (r, c), n in sorted(self.requests.items())],
            "requests_total": sum(self.requests.values()),
            "evaluations": dict(sorted(self.evaluations.items())),
            "evaluations_in_flight": self.in_flight,
            "request_seconds": {"p50": percentile(request_s, 0.5), "p99": percentile(request_s, 0.99),
                                "count": len(request_s)},
            "evaluator_seconds": {"p50": percentile(evaluator_s, 0.5), "p99": percentile(evaluator_s, 0.99),
                                  "count": len(evaluator_s)},
            "pool": pool,
        }

    def prometheus(self, pool: dict[str, Any] | None = None) -> str:
        """Prometheus text exposition format (version 0.0.4)."""
        snap = self.snapshot(pool)
        lines = [
            "# HELP cuda_agent_service_requests_total HTTP requests answered, by route and status code.",
            "# TYPE cuda_agent_service_requests_total counter",
        ]
        lines += [f'cuda_agent_service_requests_total{{route="{r["route"]}",code="{r["code"]}"}} {r["count"]}'
                  for r in snap["requests"]]
        lines += ["# HELP cuda_agent_service_evaluations_total Evaluations answered, by verdict.",
                  "# TYPE cuda_agent_service_evaluations_total counter"]
        lines += [f'cuda_agent_service_evaluations_total{{status="{s}"}} {n}' for s, n in snap["evaluations"].items()]
        lines += ["# HELP cuda_agent_service_evaluations_in_flight Evaluations admitted and not answered.",
                  "# TYPE cuda_agent_service_evaluations_in_flight gauge",
                  f"cuda_agent_service_evaluations_in_flight {self.in_flight}"]
        for name, key in (("request", "request_seconds"), ("evaluator", "evaluator_seconds")):
            lines += [f"# HELP cuda_agent_service_{name}_seconds Recent {name} latency quantiles.",
                      f"# TYPE cuda_agent_service_{name}_seconds summary"]
            for q in ("p50", "p99"):
                value = snap[key][q]
                if value is not None:
                    lines.append(f'cuda_agent_service_{name}_seconds{{quantile="0.{q[1:]}"}} {value:.6f}')
            lines.append(f"cuda_agent_service_{name}_seconds_count {snap[key]['count']}")
        if pool:
            for key in ("queue_depth", "pending", "running", "submitted", "completed", "failed", "rejected"):
                if isinstance(pool.get(key), (int, float)):
                    lines += [f"# TYPE cuda_agent_pool_{key} gauge", f"cuda_agent_pool_{key} {pool[key]}"]
        return "\n".join(lines) + "\n"

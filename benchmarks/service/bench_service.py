"""The reward service under load: N concurrent clients for D seconds, honest and malformed requests.

    .venv/bin/python benchmarks/service/bench_service.py --clients 64 --duration 60 \
        --out benchmarks/service/results_cpu.json

Starts ``cuda-agent serve-reward`` on 127.0.0.1 (CPU, embedded local pool, a token, an in-flight
limit) unless --url names a running one. Each client sends, until the time is up, a random mix
(seeded) of honest requests (a kernel answer to /get_reward, an answer without code, a
verify-only /v1/evaluate) and malformed ones (not JSON, unknown task, length mismatch, invalid
job, body over the limit, wrong token, unknown route). Every logical request carries its own
X-Request-ID; a 503 is retried after its Retry-After with the same id.

Checks (exit 1 if any fails): every logical request got exactly one final answer, carrying its
id; each answer has the status its kind expects (honest 200, malformed its 4xx); a reward answer
has one reward per query; the server counted exactly the HTTP requests the clients sent (none lost,
none answered twice; /metrics and /health are left out of that count, so the server may be
watched during the run). Reports p50 / p99 of the latency, of the evaluator's own time (the results'
``wall_s``) and of their difference (queueing, HTTP, parsing), per kind.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
TASK_ID = "examples/diag_matmul"
TOKEN = "bench-token"
PROMPT = "<|im_start|>user\nWrite it. Example:\n```python model_new.py\n...\n```<|im_end|>\n<|im_start|>assistant\n"

# kind -> (weight, expected final status)
KINDS: dict[str, tuple[int, int]] = {
    "reward_kernel": (15, 200),
    "reward_no_code": (15, 200),
    "evaluate_verify": (20, 200),
    "not_json": (8, 400),
    "unknown_task": (8, 400),
    "length_mismatch": (7, 400),
    "invalid_job": (7, 400),
    "too_large": (6, 413),
    "wrong_token": (7, 401),
    "no_route": (7, 404),
}
HONEST = {"reward_kernel", "reward_no_code", "evaluate_verify"}


def _solution() -> dict[str, str]:
    root = REPO / "examples" / "solutions" / "diag_matmul" / "cpu_fast"
    return {p.relative_to(root).as_posix(): p.read_text() for p in [root / "model_new.py",
                                                                    *sorted((root / "kernels").iterdir())]}


FILES = _solution()
PROBLEM = (REPO / "examples" / "problems" / "diag_matmul.py").read_text()
ANSWER = "\n".join(f"```{'python' if k.endswith('.py') else 'cpp'} {k}\n{v}```" for k, v in FILES.items())


def request_of(kind: str, max_body_bytes: int) -> tuple[str, str, bytes, dict[str, str]]:
    """(method, path, body, headers) of one request of `kind`."""
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def body(obj: Any) -> bytes:
        return json.dumps(obj).encode()

    if kind == "reward_kernel":
        return "POST", "/get_reward", body({"query": [PROMPT + ANSWER], "prompts": [PROMPT], "labels": [TASK_ID]}), auth
    if kind == "reward_no_code":
        return "POST", "/get_reward", body({"query": [PROMPT + "no idea", PROMPT + "none"], "prompts": [PROMPT] * 2,
                                            "labels": [TASK_ID, {"ground_truth": TASK_ID}]}), auth
    if kind == "evaluate_verify":
        job = {"problem_src": PROBLEM, "files": FILES, "options": {"profile": False, "correctness_trials": 1}}
        return "POST", "/v1/evaluate", body(job), auth
    if kind == "not_json":
        return "POST", "/get_reward", b"{query: nope", auth
    if kind == "unknown_task":
        return "POST", "/get_reward", body({"query": ["x"], "labels": ["no/such/task"]}), auth
    if kind == "length_mismatch":
        return "POST", "/get_reward", body({"query": ["x", "y"], "labels": [TASK_ID]}), auth
    if kind == "invalid_job":
        return "POST", "/v1/evaluate", body({"jobs": [{"files": {"model_new.py": ""}}]}), auth
    if kind == "too_large":
        return "POST", "/get_reward", body({"query": ["x" * (max_body_bytes + 1)], "labels": [TASK_ID]}), auth
    if kind == "wrong_token":
        return "POST", "/get_reward", body({"query": ["x"], "labels": [TASK_ID]}), {**auth, "Authorization": "Bearer no"}
    if kind == "no_route":
        return "GET", "/v2/nothing", b"", auth
    raise ValueError(kind)


@dataclass
class Record:
    """One logical request and its final answer."""

    id: str
    kind: str
    attempts: int = 0
    answers_503: int = 0
    final_status: int | None = None
    answered_id: str | None = None
    latency_s: float | None = None
    """Final attempt: send to answer."""
    total_s: float | None = None
    """First send to final answer, retries included."""
    evaluator_s: float | None = None
    problems: list[str] = field(default_factory=list)


async def client_loop(index: int, url: str, deadline: float, seed: int, max_body_bytes: int,
                      records: list[Record], kinds: list[str]) -> None:
    rng = random.Random(seed * 1000 + index)
    names, weights = kinds, [KINDS[k][0] for k in kinds]
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(1800, connect=30), limits=limits) as http:
        number = 0
        while time.monotonic() < deadline:
            kind = rng.choices(names, weights)[0]
            record = Record(id=f"c{index}-{number}", kind=kind)
            number += 1
            records.append(record)
            await one_request(http, record, max_body_bytes)


async def one_request(http: httpx.AsyncClient, record: Record, max_body_bytes: int) -> None:
    method, path, body, headers = request_of(record.kind, max_body_bytes)
    first = time.monotonic()
    while True:
        record.attempts += 1
        sent = time.monotonic()
        try:
            answer = await http.request(method, path, content=body or None,
                                        headers={**headers, "X-Request-ID": record.id})
        except httpx.HTTPError as exc:
            record.problems.append(f"transport error: {exc!r}")
            return
        if answer.status_code == 503:
            record.answers_503 += 1
            await asyncio.sleep(float(answer.headers.get("Retry-After", "1")))
            continue
        record.final_status = answer.status_code
        record.answered_id = answer.headers.get("X-Request-ID")
        record.latency_s = time.monotonic() - sent
        record.total_s = time.monotonic() - first
        check(record, answer, body)
        return


def check(record: Record, answer: httpx.Response, body: bytes) -> None:
    expected = KINDS[record.kind][1]
    if record.final_status != expected:
        record.problems.append(f"status {record.final_status}, expected {expected}: {answer.text[:300]}")
    if record.answered_id != record.id:
        record.problems.append(f"answered as {record.answered_id!r}")
    try:
        data = answer.json()
    except ValueError:
        record.problems.append("answer is not JSON")
        return
    if expected != 200:
        if not data.get("message") or "\n" in data["message"] or data.get("request_id") != record.id:
            record.problems.append(f"bad error body {data}")
        return
    if record.kind.startswith("reward"):
        queries = len(json.loads(body)["query"])
        if not (len(data["rewards"]) == len(data["scores"]) == len(data["infos"]) == queries):
            record.problems.append(f"{len(data['rewards'])} rewards for {queries} queries")
        if any(info["infra_failure"] for info in data["infos"]):
            record.problems.append(f"infrastructure failure: {[i['error'] for i in data['infos']]}")
        walls = [info["eval_wall_s"] for info in data["infos"] if info["status"] != "static_check_failed"]
        record.evaluator_s = max(walls) if walls else 0.0
        if record.kind == "reward_kernel" and data["infos"][0]["status"] != "ok":
            record.problems.append(f"kernel answer scored {data['infos'][0]['status']}")
    else:
        results = data["results"]
        if len(results) != 1 or results[0]["status"] != "ok" or not results[0]["receipt"]["device_name"]:
            record.problems.append(f"evaluation {[(r['status'], r['error']) for r in results]}")
        record.evaluator_s = max(r["wall_s"] or 0.0 for r in results)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 4)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1], 4)


def summarise(records: list[Record], wall_s: float, server: dict[str, Any]) -> dict[str, Any]:
    by_kind: dict[str, Any] = {}
    for kind in sorted({r.kind for r in records}, key=list(KINDS).index):
        rows = [r for r in records if r.kind == kind and r.final_status is not None]
        latency = [r.latency_s for r in rows if r.latency_s is not None]
        entry: dict[str, Any] = {"requests": len(rows), "retried_503": sum(r.answers_503 for r in rows),
                                 "latency_p50_s": pct(latency, 0.5), "latency_p99_s": pct(latency, 0.99)}
        if kind in HONEST:
            evaluator = [r.evaluator_s for r in rows if r.evaluator_s is not None]
            over = [r.latency_s - r.evaluator_s for r in rows if r.evaluator_s is not None and r.latency_s is not None]
            total = [r.total_s for r in rows if r.total_s is not None]
            entry.update(evaluator_p50_s=pct(evaluator, 0.5), evaluator_p99_s=pct(evaluator, 0.99),
                         over_evaluator_p50_s=pct(over, 0.5), over_evaluator_p99_s=pct(over, 0.99),
                         with_retries_p50_s=pct(total, 0.5), with_retries_p99_s=pct(total, 0.99))
        by_kind[kind] = entry
    attempts = sum(r.attempts for r in records)
    ids = collections.Counter(r.id for r in records)
    problems = [f"{r.id} ({r.kind}): {p}" for r in records for p in r.problems]
    problems += [f"{r.id} ({r.kind}): no final answer" for r in records if r.final_status is None and not r.problems]
    problems += [f"id {i} used {n} times" for i, n in ids.items() if n > 1]
    if server.get("client_requests") != attempts:
        problems.append(f"server counted {server.get('client_requests')} requests, clients sent {attempts}")
    return {
        "logical_requests": len(records), "http_requests": attempts, "server_counted": server.get("client_requests"),
        "answered_once": sum(r.final_status is not None for r in records),
        "honest": sum(r.kind in HONEST for r in records), "malformed": sum(r.kind not in HONEST for r in records),
        "answers_503": sum(r.answers_503 for r in records), "wall_s": round(wall_s, 1),
        "evaluations": server.get("evaluations"), "by_kind": by_kind, "problems": problems[:50],
        "problem_count": len(problems),
    }


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "CUDA_AGENT_REWARD_TOKEN": TOKEN}
    env.pop("CUDA_AGENT_POOL", None)
    command = [sys.executable, "-m", "cuda_agent.cli.main", "serve-reward", "--device", "cpu", "--port", "0",
               "--tasks", str(REPO / "examples" / "data" / "single_turn.parquet"), "--cpu-workers",
               str(args.cpu_workers), "--max-in-flight", str(args.max_in_flight), "--max-batch", "4",
               "--max-body-mb", str(args.max_body_bytes / 2**20), "--retry-after", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open(args.server_log, "w"), text=True,
                               env=env, cwd=REPO)
    url = process.stdout.readline().strip()
    if not url.startswith("http"):
        raise SystemExit(f"serve-reward did not start; see {args.server_log}")
    return process, url


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    warm_requests = 0
    async with httpx.AsyncClient(base_url=url, timeout=args.warm_timeout) as http:  # compile cache, baselines
        for kind in ("evaluate_verify", "reward_kernel"):
            if kind in args.kinds:
                method, path, body, headers = request_of(kind, args.max_body_bytes)
                warm_requests += 1
                (await http.request(method, path, content=body, headers=headers)).raise_for_status()
    records: list[Record] = []
    started = time.monotonic()
    deadline = started + args.duration
    await asyncio.gather(*(client_loop(i, url, deadline, args.seed, args.max_body_bytes, records, args.kinds)
                           for i in range(args.clients)))
    wall = time.monotonic() - started
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        server = (await http.get("/metrics?format=json", headers={"Authorization": f"Bearer {TOKEN}"})).json()
    # what the clients can have sent: every route but the monitoring ones (polled by hand, or by this script)
    server["client_requests"] = sum(r["count"] for r in server["requests"]
                                    if r["route"] not in ("/metrics", "/health")) - warm_requests
    return summarise(records, wall, server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds during which new requests start")
    parser.add_argument("--url", help="a running service (token bench-token); default: start one")
    parser.add_argument("--cpu-workers", type=int, default=1)
    parser.add_argument("--max-in-flight", type=int, default=16)
    parser.add_argument("--max-body-bytes", type=int, default=2**20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", type=lambda v: v.split(","), default=list(KINDS),
                        help=f"comma-separated request kinds (default all: {','.join(KINDS)})")
    parser.add_argument("--warm-timeout", type=float, default=900.0, help="limit of each warm-up request, s")
    parser.add_argument("--server-log", default="/tmp/bench_service_server.log")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if unknown := set(args.kinds) - set(KINDS):
        parser.error(f"unknown kinds {sorted(unknown)}; choose from {','.join(KINDS)}")
    process = None
    url = args.url
    if url is None:
        process, url = start_server(args)
    try:
        summary = asyncio.run(run(args, url))
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=120)
    summary["command"] = " ".join(["benchmarks/service/bench_service.py", *sys.argv[1:]])
    summary["settings"] = {k: v for k, v in vars(args).items() if k not in ("out", "server_log")}
    summary["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "load_avg_at_end": os.getloadavg()}
    text = json.dumps(summary, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(1 if summary["problem_count"] else 0)


if __name__ == "__main__":
    main()

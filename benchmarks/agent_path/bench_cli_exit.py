"""When a command's answer arrives and when the command has exited: what an agent's tool call waits for.

Runs COMMAND --repeats times (a fresh process each), reads its first stdout line (the `--json`
answer) and then waits for its exit. `cuda-agent eval` exits without the interpreter's teardown of
torch's modules (cli/entry.py `run`), so the second figure should follow the first within ~0.05 s.

Usage: python benchmarks/agent_path/bench_cli_exit.py --repeats 5 -- cuda-agent eval WS --json --no-cache
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    runs = []
    for _ in range(args.repeats):
        t0 = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        answered = time.monotonic() - t0
        proc.stdout.read()
        proc.wait()
        runs.append({"answer_s": round(answered, 3), "exit_s": round(time.monotonic() - t0, 3),
                     "rc": proc.returncode, "answer": first[:80].decode(errors="replace")})
    after = [r["exit_s"] - r["answer_s"] for r in runs]
    print(json.dumps({"command": command, "median_answer_s": statistics.median(r["answer_s"] for r in runs),
                      "median_exit_s": statistics.median(r["exit_s"] for r in runs),
                      "median_exit_after_answer_s": round(statistics.median(after), 3), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()

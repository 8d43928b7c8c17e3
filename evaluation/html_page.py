"""``report --html``: one self-contained page — the table, the plots (inlined PNG) and a drill-down
from each task to its trajectory (turns, tool calls, observations) and the evaluator's verdicts
and timing receipt, so a researcher can see how a model won or cheated.

No external resources: styles and the few lines of script are inline. A drill-down is a
``<details>`` element; opening the page at ``#<its id>`` (or clicking the task's row) opens it.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cuda_agent.evaluation.report import NOTES, SUMMARY_HEADER, Report, pass_k_table, summary_rows
from cuda_agent.evaluation.results import RunResult, latest

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0} tr.pass td.status{color:#070} tr.fail td.status{color:#a00} tr.excluded td.status{color:#888}
details{border:1px solid #ddd;margin:.4em 0;padding:.3em .6em;border-radius:4px}
details[open]{background:#fafafa} summary{cursor:pointer;font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:.4em;max-height:28em;overflow:auto;font-size:12px}
.msg{border-left:4px solid #bbb;margin:.4em 0;padding-left:.6em}
.msg.assistant{border-color:#36c}.msg.tool{border-color:#c90}.msg.system{border-color:#999}.msg.user{border-color:#393}
.role{font-size:12px;font-weight:600;text-transform:uppercase;color:#555}
img{max-width:100%;border:1px solid #eee}
"""

_SCRIPT = """
function openFromHash(){
  var id = decodeURIComponent(location.hash.slice(1)); if(!id) return;
  var el = document.getElementById(id); if(!el || el.tagName !== 'DETAILS') return;
  el.open = true; el.scrollIntoView();
  var body = el.querySelector('.drill');
  if(body){ el.setAttribute('data-shown-height', String(Math.round(body.getBoundingClientRect().height))); }
}
window.addEventListener('hashchange', openFromHash);
window.addEventListener('DOMContentLoaded', openFromHash);
"""


def anchor(label: str, task_id: str, sample: int) -> str:
    """The element id of a task's drill-down."""
    return "t-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{label}-{task_id}-{sample}").strip("-")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def load_trajectories(folders: Sequence[Path | None]) -> list[dict[tuple[str, int], Any]]:
    """Per run, the latest trajectory record of each (task, sample), from its records folder."""
    from cuda_agent.recipe.records import read_records

    out: list[dict[tuple[str, int], Any]] = []
    for folder in folders:
        found: dict[tuple[str, int], Any] = {}
        if folder is not None and folder.is_dir() and any(folder.rglob("*.parquet")):
            for record in read_records([folder]):
                key = (record.task_id, record.sample)
                if key not in found or record.created >= found[key].created:
                    found[key] = record
        out.append(found)
    return out


def default_records_folder(results_path: Path) -> Path:
    """Where ``cuda-agent run`` puts the trajectories of a results file by default."""
    return results_path.with_name(results_path.stem + ".trajectories")


def render_page(report: Report, runs: Sequence[tuple[str, Path, list[RunResult]]], plots: dict[str, bytes],
                trajectories: Sequence[Path] | None = None) -> str:
    folders: list[Path | None] = list(trajectories) if trajectories else [default_records_folder(p) for _, p, _ in runs]
    folders += [None] * (len(runs) - len(folders))
    records = load_trajectories(folders)
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>cuda-agent evaluation report</title>",
             f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>",
             "<h1>Evaluation report</h1>", f"<p>{_e(NOTES)}</p>", "<h2>Metrics per level</h2>",
             _table(SUMMARY_HEADER, summary_rows(report))]
    pk = pass_k_table(report)
    if pk is not None:
        parts += ["<h2>pass@k</h2>", _table(*pk)]
    parts.append("<h2>Plots</h2>")
    for name, png in plots.items():
        data = base64.b64encode(png).decode()
        parts.append(f"<figure><img alt='{_e(name)}' src='data:image/png;base64,{data}'><figcaption>{_e(name)}"
                     "</figcaption></figure>")
    parts.append("<h2>Tasks</h2>")
    for (label, path, results), found in zip(runs, records):
        parts.append(f"<h3>{_e(label)} <small>({_e(path)})</small></h3>")
        parts.append(_task_index(label, results))
        for result in sorted(latest(results).values(), key=lambda r: (r.level or 0, r.task_id, r.sample)):
            parts.append(_drill_down(label, result, found.get(result.key)))
    parts.append("</body></html>")
    return "\n".join(parts)


def _task_index(label: str, results: list[RunResult]) -> str:
    rows = []
    for r in sorted(latest(results).values(), key=lambda r: (r.level or 0, r.task_id, r.sample)):
        css = "excluded" if r.excluded else ("pass" if r.correct else "fail")
        speed = "-" if r.speedup_vs_eager is None else f"{r.speedup_vs_eager:.2f}x"
        compile_ = "-" if r.speedup_vs_compile is None else f"{r.speedup_vs_compile:.2f}x"
        rows.append(f"<tr class='{css}'><td><a href='#{anchor(label, r.task_id, r.sample)}'>{_e(r.task_id)}</a></td>"
                    f"<td>{r.sample}</td><td>{_e(r.level)}</td><td class='status'>{_e(r.status)}</td>"
                    f"<td>{_e(r.reward)}</td><td>{speed}</td><td>{compile_}</td><td>{r.turns}</td>"
                    f"<td>{r.wall_s:.1f}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ["task", "sample", "level", "status", "reward", "vs eager",
                                            "vs compile", "turns", "wall s"])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _drill_down(label: str, result: RunResult, record: Any) -> str:
    out = [f"<details id='{anchor(label, result.task_id, result.sample)}'>",
           f"<summary>{_e(result.task_id)} · sample {result.sample} · {_e(result.status)}"
           f"{' · ' + _e(result.stop_reason) if result.stop_reason else ''}</summary><div class='drill'>"]
    facts = [("status", result.status), ("reward", result.reward), ("runtime (us)", result.runtime_us),
             ("eager (us)", result.eager_us), ("torch.compile (us)", result.torch_compile_us),
             ("speed-up vs eager", result.speedup_vs_eager), ("speed-up vs compile", result.speedup_vs_compile),
             ("turns", result.turns), ("tokens", result.tokens), ("wall (s)", result.wall_s),
             ("stop reason", result.stop_reason), ("error", result.error)]
    out.append(_table(["", ""], [[k, "-" if v in (None, "") else v] for k, v in facts]))
    evaluation = result.evaluation or {}
    if evaluation.get("stages"):
        out.append("<h4>Evaluator verdicts</h4>")
        rows = []
        for name, stage in evaluation["stages"].items():
            rows.append([name, stage.get("ok"), stage.get("duration_s") and f"{stage['duration_s']:.2f}",
                         stage.get("cached")])
        out.append(_table(["stage", "ok", "seconds", "cached"], rows))
        for name, stage in evaluation["stages"].items():
            if stage.get("log"):
                out.append(f"<div><b>{_e(name)} log</b><pre>{_e(stage['log'])}</pre></div>")
    if evaluation.get("violations"):
        out.append(f"<h4>Violations</h4><pre>{_e(chr(10).join(evaluation['violations']))}</pre>")
    if evaluation.get("receipt") or evaluation.get("timings"):
        out.append("<h4>Timing receipt</h4>")
        out.append(f"<pre>{_e(json.dumps({'receipt': evaluation.get('receipt'), 'timings': evaluation.get('timings')}, indent=1))}</pre>")
    if record is not None:
        out.append(f"<h4>Trajectory ({record.turns} turns, flags {_e(record.flags.model_dump())})</h4>")
        for message in record.messages:
            out.append(_message(message))
    else:
        out.append("<p><i>No trajectory record for this sample.</i></p>")
    out.append("</div></details>")
    return "".join(out)


def _message(message: dict[str, Any]) -> str:
    role = message.get("role", "")
    title = role + (f" · {message['name']}" if message.get("name") else "")
    if message.get("tool_call_id"):
        title += f" · {message['tool_call_id']}"
    body = f"<pre>{_e(message.get('content'))}</pre>" if message.get("content") else ""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments") or ""
        try:
            arguments = json.dumps(json.loads(arguments), indent=1)
        except (ValueError, TypeError):
            pass
        body += f"<div><b>call {_e(function.get('name'))}</b> <small>{_e(call.get('id'))}</small><pre>{_e(arguments)}</pre></div>"
    return f"<div class='msg {_e(role)}'><div class='role'>{_e(title)}</div>{body}</div>"

"""What makes a stage's output reusable, and what a stage must hand on.

Append-only stages (crawl, compose) record the settings that made their output in a sidecar
``<output>.settings.json``. A rerun with the same settings resumes; a rerun with other settings
refuses (`SettingsChangedError`, exit 2) and says how to start fresh, because reusing the
records would silently mix two configurations. Record-keyed stages (filter, decontam) key each
record on its task's source and the settings instead, and judge again what changed.

A stage that ends with nothing for the next one raises `NothingToPassOnError` (exit 2) with
the reason, instead of letting the pipeline export an empty dataset with exit 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cuda_agent.errors import ConfigError


class SettingsChangedError(ConfigError):
    """An existing stage output was made with other settings than this run's."""


class NothingToPassOnError(ConfigError):
    """A stage ended with no task for the next stage."""


def settings_path(output: str | Path) -> Path:
    """The sidecar recording the settings that made `output`."""
    path = Path(output)
    return path.with_name(path.name + ".settings.json")


def _has_records(output: Path) -> bool:
    return output.exists() and output.stat().st_size > 0


def check_settings(output: str | Path, stage: str, settings: dict[str, Any]) -> None:
    """Refuse to append to `output` when it was made with other `settings`; record them otherwise."""
    path = Path(output)
    sidecar = settings_path(path)
    normal = json.loads(json.dumps(settings, sort_keys=True, default=str))
    if _has_records(path):
        previous = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.exists() else None
        if previous != normal:
            if previous is None:
                what = "by an older version that did not record its settings"
            else:
                changed = sorted(k for k in set(previous) | set(normal) if previous.get(k) != normal.get(k))
                what = "with " + ", ".join(f"{k}={previous.get(k)!r}" for k in changed) + " (this run: " + \
                       ", ".join(f"{k}={normal.get(k)!r}" for k in changed) + ")"
            raise SettingsChangedError(
                f"{path} was made by `{stage}` {what}; reusing it would mix two configurations. Start fresh: "
                f"delete {path} and {sidecar.name} (or the whole output folder), or choose another --out")
    path.parent.mkdir(parents=True, exist_ok=True)
    sidecar.write_text(json.dumps(normal, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def require(count: int, stage: str, why: str) -> None:
    """Raise `NothingToPassOnError` when `stage` produced no task (`why` says what to change)."""
    if count <= 0:
        raise NothingToPassOnError(f"{stage} ended with no task to pass on: {why}")

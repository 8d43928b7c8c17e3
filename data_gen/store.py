"""JSONL stores keyed by id: how stages stay resumable and idempotent.

Every stage appends one JSON object per line and, when restarted, reads the ids already
written and skips them. A torn last line (the process was killed mid-write) is ignored on
read and overwritten by the next append.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from cuda_agent.errors import ConfigError

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


def _key(record: BaseModel) -> str:
    key = getattr(record, "id", None) or getattr(record, "task_id", None)
    if not isinstance(key, str):
        raise ConfigError(f"{type(record).__name__} has no 'id' or 'task_id' field to key a JSONL store by")
    return key


class JsonlStore(Generic[M]):
    """An append-only JSONL file of `model` records, keyed by their `id` (or `task_id`)."""

    def __init__(self, path: str | os.PathLike[str], model: type[M]) -> None:
        self.path = Path(path)
        self.model = model

    def __iter__(self) -> Iterator[M]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    yield self.model.model_validate_json(line)
                except ValidationError as exc:
                    if handle.read(1):  # not the last line: real corruption, not a torn write
                        raise ConfigError(f"{self.path}:{number} is not a valid {self.model.__name__}: {exc}") from exc
                    logger.warning("ignoring a torn last line in %s", self.path)

    def check_input(self) -> int:
        """Validate the file as a stage's input: every non-empty line a valid record (no torn-tail
        tolerance: an input is not being written) and at least one; returns the count. ConfigError
        names the first bad line."""
        if not self.path.is_file():
            raise ConfigError(f"{self.path} not found; pass a JSONL file of {self.model.__name__} records")
        count = 0
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    self.model.model_validate_json(line)
                except ValidationError as exc:
                    first = exc.errors(include_url=False)[0]
                    where = ".".join(str(p) for p in first.get("loc", ())) or "line"
                    raise ConfigError(f"{self.path}:{number} is not a valid {self.model.__name__} ({where}: "
                                      f"{first.get('msg')}); fix or remove that line") from None
                count += 1
        if count == 0:
            raise ConfigError(f"{self.path} holds no {self.model.__name__} records; pass a non-empty JSONL file")
        return count

    def load(self) -> list[M]:
        """All records, the last one winning when an id repeats."""
        records: dict[str, M] = {}
        for record in self:
            records[_key(record)] = record
        return list(records.values())

    def ids(self) -> set[str]:
        """Ids already stored."""
        return {_key(record) for record in self}

    def append(self, records: Iterable[M]) -> int:
        """Append records (flushed line by line); returns how many were written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_torn_tail()
        written = 0
        with self.path.open("a", encoding="utf-8") as handle:
            for record in records:
                handle.write(record.model_dump_json() + "\n")
                handle.flush()
                written += 1
        return written

    def write(self, records: Iterable[M]) -> int:
        """Replace the file's content atomically; returns how many records were written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        count = 0
        with tmp.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(record.model_dump_json() + "\n")
                count += 1
        tmp.replace(self.path)
        return count

    def _truncate_torn_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as handle:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) == b"\n":
                return
            handle.seek(0)
            content = handle.read()
            cut = content.rfind(b"\n") + 1
            handle.truncate(cut)


def write_json(path: str | os.PathLike[str], payload: BaseModel) -> Path:
    """Write a pydantic model as indented JSON (reports)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(payload.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return target


def read_json(path: str | os.PathLike[str], model: type[M]) -> M:
    """Read a JSON file written by `write_json`."""
    return model.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))

"""Task identifiers: stable, filesystem-safe, derived from content where possible."""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe(text: str) -> str:
    """`text` with every character outside [A-Za-z0-9_.-] replaced by '_'."""
    return _UNSAFE.sub("_", text).strip("_") or "task"


def seed_id(template_key: str) -> str:
    """Id of a crawled seed, e.g. ``seed_torch.nn.Conv2d`` or ``seed_torch.nn.Conv2d__depthwise``."""
    return "seed_" + safe(template_key.replace(":", "__"))


def content_id(prefix: str, key: str, length: int = 12) -> str:
    """``<prefix>_<sha256(key)[:length]>``: the id of a composed or imported task."""
    return f"{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:length]}"

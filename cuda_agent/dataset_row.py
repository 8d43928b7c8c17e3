"""The ``extra_info`` of one veRL dataset row, typed: what every writer puts there and every reader takes.

docs/verl.md ("Dataset contract") describes the row; this model is that contract in code. The writers
(``data_gen/export.py``, ``examples/data/make_example_parquet.py``) build a ``RowInfo`` and store its
``to_row()``; the readers (the reward's ``TaskSpec``, the agentic loop's turn limit, ``cuda-agent run
--dataset``) go through ``RowInfo.read``, which names the row in its error. Keys beyond these are kept:
veRL and other tasks put their own there (``tools_kwargs``, ``index`` of a split).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.harness.models import Device, PrecisionPolicy


class RowInfo(BaseModel):
    """A row's ``extra_info``: the trusted task and what describes it."""

    model_config = ConfigDict(extra="allow")

    task_id: str | None = Field(None, description="Task identifier (logged, the results' key).")
    problem_src: str | None = Field(None, description="The reference model.py source (required to score).")
    device: Device | None = Field(None, description="Where the kernels compile and run.")
    precision_policy: PrecisionPolicy | None = Field(None, description="None: the default, paper.")
    level: int | None = Field(None, description="KernelBench-style difficulty level.")
    source: str | None = Field(None, description="What produced the task (a generator, a benchmark).")
    index: int | None = Field(None, description="The row's position in its dataset.")
    max_turns: int | None = Field(None, ge=1, description="This task's turn limit, over the loop's.")
    workspace_snapshot: str | None = Field(None, description="Re-score this saved workspace folder.")

    @field_validator("task_id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        return value if value is None else str(value)

    @classmethod
    def read(cls, extra_info: Mapping[str, Any] | None, *, where: str = "extra_info") -> RowInfo:
        """The row's ``extra_info`` checked; ``where`` names the row in the error (ConfigError)."""
        if extra_info is not None and not isinstance(extra_info, Mapping):
            raise ConfigError(f"{where}: extra_info must be an object, not {type(extra_info).__name__}")
        try:
            return cls.model_validate({key: _plain(value) for key, value in (extra_info or {}).items()})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"{where}: invalid extra_info ({problems}); see docs/verl.md, 'Dataset contract'") from None

    def to_row(self) -> dict[str, Any]:
        """The plain dict a parquet row stores (JSON values; unset fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    @property
    def policy(self) -> PrecisionPolicy:
        """The precision policy, its default filled in."""
        return self.precision_policy or PrecisionPolicy.PAPER


def _plain(value: Any) -> Any:
    """numpy scalars (what pandas hands back from parquet) as Python values."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)) and getattr(value, "shape", None) == ():
        return value.item()
    return value

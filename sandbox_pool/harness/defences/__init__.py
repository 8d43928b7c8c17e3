"""The catalogue of defences: one record per capability the harness refuses a candidate (docs/defences.md)."""

from cuda_agent.sandbox_pool.harness.defences.catalogue import CATALOGUE, by_id, claiming
from cuda_agent.sandbox_pool.harness.defences.model import Defence

__all__ = ["CATALOGUE", "Defence", "by_id", "claiming"]

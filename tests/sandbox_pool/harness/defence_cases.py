"""Hack test cases parametrised from the catalogue of defences: each case's id starts with its defence's."""

from __future__ import annotations

import pytest

from cuda_agent.sandbox_pool.harness.defences import claiming

TEST_HACKS = "tests/sandbox_pool/harness/test_hacks.py"


def catalogued(cases: dict[str, object], test_file: str = TEST_HACKS) -> list:
    """One pytest param per case of `cases`, with the id '<defence>/<case>'. A case no defence lists fails the
    collection (KeyError naming the catalogue): a new hack is catalogued or not tested."""
    return [pytest.param(name, id=f"{claiming(test_file, name).id}/{name}") for name in sorted(cases)]

"""The service's pure parts: cutting the prompt off a query, tasks by label, limits, config checks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cuda_agent.errors import ConfigError, PoolOverloadedError
from cuda_agent.service.admission import Admission, TooLargeError, read_limited
from cuda_agent.service.config import ServiceConfig
from cuda_agent.service.queries import parse_query, response_text
from cuda_agent.service.tasks import TaskTable

REPO = Path(__file__).resolve().parents[2]
PROMPT = "<|im_start|>user\nExample:\n```python model_new.py\n...\n```\n```cuda kernels/fused.cu\n...\n```<|im_end|>\n"
ANSWER = "Sure.\n```python model_new.py\nimport x\n```\n```cpp kernels/k.cpp\nint f();\n```<|im_end|>"


def test_the_prompt_and_its_example_blocks_are_cut_off() -> None:
    answer, found = parse_query(PROMPT + ANSWER, PROMPT)
    assert found and answer.files == {"model_new.py": "import x\n", "kernels/k.cpp": "int f();\n"}
    # decoding changed the prompt's start (a BOS token): its tail still finds the cut
    answer, found = parse_query("<s>" + PROMPT.replace("<|im_start|>user", "user") + ANSWER, PROMPT)
    assert found and "kernels/fused.cu" not in answer.files
    # no prompt given: the whole query, reported as such
    assert response_text("q", None) == ("q", True)
    text, found = response_text("other prompt" + ANSWER, PROMPT)
    assert not found and text.startswith("other prompt")


def test_tasks_by_id_or_by_row_object() -> None:
    table = TaskTable.load([REPO / "examples" / "data" / "single_turn.parquet"], "cpu")
    task = table.resolve("examples/diag_matmul")
    assert task.device == "cpu" and "class Model" in task.problem_src
    assert table.resolve({"style": "rule", "ground_truth": "examples/diag_matmul"}) == task
    assert table.resolve({"task_id": "examples/diag_matmul"}) == task
    with pytest.raises(ConfigError, match="unknown task 'nope'.*1 tasks"):
        table.resolve("nope")
    with pytest.raises(ConfigError, match="unknown task"):
        table.resolve(17)


def test_a_non_dataset_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    with pytest.raises(ConfigError, match="no extra_info"):
        TaskTable.load([tmp_path / "other.parquet"], "cpu")
    with pytest.raises(ConfigError, match="not found"):
        TaskTable.load([tmp_path / "none.parquet"], "cpu")


def test_admission_refuses_a_request_that_does_not_fit_whole() -> None:
    admission = Admission(4)
    with admission.admit(3):
        with pytest.raises(PoolOverloadedError, match="3 evaluations in flight, limit 4"):
            with admission.admit(2):
                pass
        with admission.admit(1):
            assert admission.in_flight == 4
    assert admission.in_flight == 0


def test_body_limit_on_declared_and_streamed_size() -> None:
    async def chunks(n: int):
        for _ in range(n):
            yield b"x" * 100

    assert asyncio.run(read_limited(chunks(3), "300", 300)) == b"x" * 300
    with pytest.raises(TooLargeError, match="1000 bytes exceeds the limit of 300"):
        asyncio.run(read_limited(chunks(1), "1000", 300))
    with pytest.raises(TooLargeError, match="exceeds the limit"):
        asyncio.run(read_limited(chunks(4), None, 300))


def test_config_needs_a_token_off_loopback() -> None:
    assert ServiceConfig(host="127.0.0.1").token is None
    with pytest.raises(ValueError, match="without a token"):
        ServiceConfig(host="0.0.0.0")
    assert ServiceConfig(host="0.0.0.0", token="t").host == "0.0.0.0"
    with pytest.raises(ValueError, match="max_batch"):
        ServiceConfig(max_batch=10, max_in_flight=5)

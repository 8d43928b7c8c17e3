"""Parsing single-turn answers into candidate files."""

from cuda_agent.reward_fns.answer import parse_answer

ANSWER = """I will fuse the ops.

```cuda kernels/fused.cu
__global__ void k() {}
```

Some text in between, with an inline ``` fence that is not a block.

```python model_new.py
import torch
import cuda_extension
```

```python
print("no path: ignored")
```

```python model.py
# the reference is not writable
```

```cpp ./kernels/fused_binding.cpp
// binding
```
"""


def test_blocks_with_allowed_paths_become_files():
    parsed = parse_answer(ANSWER)
    assert parsed.files == {
        "kernels/fused.cu": "__global__ void k() {}\n",
        "model_new.py": "import torch\nimport cuda_extension\n",
        "kernels/fused_binding.cpp": "// binding\n",
    }
    assert len(parsed.ignored) == 2


def test_paths_that_escape_or_nest_are_refused():
    text = "```cuda ../model_new.py\nx\n```\n```cuda kernels/../model.py\nx\n```\n```cuda /tmp/kernels/a.cu\nx\n```\n"
    parsed = parse_answer(text)
    assert parsed.files == {}
    assert len(parsed.ignored) == 3


def test_kernel_files_need_a_source_suffix():
    text = "```text kernels/notes.txt\nx\n```\n```cpp kernels/a.cpp\ny\n```\n"
    assert parse_answer(text).files == {"kernels/a.cpp": "y\n"}


def test_unclosed_block_is_ignored_and_last_duplicate_wins():
    text = "```python model_new.py\nA\n```\n```python model_new.py\nB\n```\n```cuda kernels/x.cu\ntruncated"
    parsed = parse_answer(text)
    assert parsed.files == {"model_new.py": "B\n"}
    assert parsed.ignored == ["unclosed block 'kernels/x.cu'"]


def test_longer_fences_may_hold_triple_backticks():
    text = "````python model_new.py\ns = '''\n```\n'''\n````\n"
    assert parse_answer(text).files == {"model_new.py": "s = '''\n```\n'''\n"}

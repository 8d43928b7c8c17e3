"""Tool calls out of generated tokens with veRL's own parsers (hermes, qwen3_coder), on a real tokenizer."""

from __future__ import annotations

import json

import pytest
from verl.experimental.agent_loop.tool_parser import ToolParser

from cuda_agent.recipe.tool_calls import ToolCallExtractor
from cuda_agent.tools import tool_schemas


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from verl.utils import hf_tokenizer

    return hf_tokenizer(str(tiny_model_dir))


def extractor(tokenizer, fmt: str) -> ToolCallExtractor:
    return ToolCallExtractor(ToolParser.get_tool_parser(fmt, tokenizer), tool_schemas())


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


EDITS = [{"old_string": "a", "new_string": "b", "replace_all": False}]


async def test_hermes_several_calls_and_nested_arguments(tokenizer):
    text = (
        "Plan.\n<tool_call>\n" + json.dumps({"name": "Bash", "arguments": {"command": "ls"}}) + "\n</tool_call>\n"
        "<tool_call>\n" + json.dumps({"name": "MultiEdit", "arguments": {"file_path": "model_new.py", "edits": EDITS}})
        + "\n</tool_call>"
    )
    content, calls = await extractor(tokenizer, "hermes").extract(encode(tokenizer, text))
    assert "Plan." in content
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("Bash", {"command": "ls"}, None),
        ("MultiEdit", {"file_path": "model_new.py", "edits": EDITS}, None),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('<tool_call>\n{"name": "Bash", "arguments": {"command": </tool_call>', "Malformed tool call"),
        ('<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}', "Malformed tool call"),  # unclosed
        ('<tool_call>\n{"name": "Compile", "arguments": {}}\n</tool_call>', "Unknown tool 'Compile'"),
        ('<tool_call>\n{"name": "Bash", "arguments": "ls"}\n</tool_call>', "must be a JSON object"),
    ],
)
async def test_hermes_defects_become_refused_calls(tokenizer, text, message):
    _, calls = await extractor(tokenizer, "hermes").extract(encode(tokenizer, text))
    assert len(calls) == 1 and calls[0].arguments is None and message in calls[0].error


async def test_no_call_means_the_model_is_done(tokenizer):
    _, calls = await extractor(tokenizer, "hermes").extract(encode(tokenizer, "All done, verification passed."))
    assert calls == []


async def test_qwen3_coder_xml_calls_with_typed_and_structured_parameters(tokenizer):
    text = (
        "Edit it.\n<tool_call>\n<function=MultiEdit>\n<parameter=file_path>\nmodel_new.py\n</parameter>\n"
        f"<parameter=edits>\n{json.dumps(EDITS)}\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=Read>\n<parameter=file_path>\nmodel.py\n</parameter>\n"
        "<parameter=offset>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    _, calls = await extractor(tokenizer, "qwen3_coder").extract(encode(tokenizer, text))
    assert [(c.name, c.arguments) for c in calls] == [
        ("MultiEdit", {"file_path": "model_new.py", "edits": EDITS}),
        ("Read", {"file_path": "model.py", "offset": 3}),
    ]


async def test_qwen3_coder_truncated_header_is_refused(tokenizer):
    text = "<tool_call>\n<function=Bash\n</tool_call>"
    _, calls = await extractor(tokenizer, "qwen3_coder").extract(encode(tokenizer, text))
    assert len(calls) == 1 and "Malformed" in calls[0].error

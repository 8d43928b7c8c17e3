"""Our parquet rows in veRL 0.9.1's own MultiTurnSFTDataset, masks checked token by token.

Tokenizer: the offline byte-level BPE of offline_model.py (a real ``PreTrainedTokenizerFast``)
with a Qwen3-style ChatML template that renders tools and prints JSON-text arguments as they are.
"""

from __future__ import annotations

import pytest
from offline_model import build_tokenizer
from records_data import call, conversation, good_turns, qwen3_style_template, record

from cuda_agent.recipe.records import write_parquet

pytestmark = pytest.mark.verl



@pytest.fixture(scope="module")
def tokenizer():
    tok = build_tokenizer()
    tok.chat_template = qwen3_style_template()
    return tok


def _dataset(path, tokenizer, max_length=4096, ignore_mismatch=False):
    from omegaconf import OmegaConf
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    config = OmegaConf.create(
        {
            "max_length": max_length,
            "truncation": "error",
            "messages_key": "messages",
            "tools_key": "tools",
            "pad_mode": "right",
            "ignore_input_ids_mismatch": ignore_mismatch,
        }
    )
    return MultiTurnSFTDataset(str(path), tokenizer, config)


def test_tools_come_back_as_dicts_with_union_keys(tmp_path, tokenizer):
    """What the dataset hands the chat template: dicts (not text); parquet's struct merge adds the
    other tools' parameter names as nulls (documented in records.py and docs/training.md)."""
    path = tmp_path / "sft.parquet"
    write_parquet([record()], path)
    tools = _dataset(path, tokenizer).tools[0]
    assert [tool["function"]["name"] for tool in tools] == ["Bash", "Write", "Read"]
    write_properties = tools[1]["function"]["parameters"]["properties"]
    assert write_properties["content"]["type"] == "string"
    assert write_properties["command"] is None


def _expected(tokenizer, messages, tools):
    """(token ids, loss mask) computed independently: each message's tokens are the difference of
    rendering the conversation up to it and up to the one before; an assistant message's tokens
    carry loss except its header."""
    header = tokenizer.encode("<|im_start|>assistant\n")
    ids: list[int] = []
    mask: list[int] = []
    previous: list[int] = []
    for index in range(len(messages)):
        rendered = tokenizer.apply_chat_template(messages[: index + 1], tools=tools, tokenize=False)
        current = tokenizer.encode(rendered)
        assert current[: len(previous)] == previous
        piece = current[len(previous) :]
        ids += piece
        if messages[index]["role"] == "assistant":
            assert piece[: len(header)] == header
            mask += [0] * len(header) + [1] * (len(piece) - len(header))
        else:
            mask += [0] * len(piece)
        previous = current
    return ids, mask


def test_rows_load_unchanged_and_only_assistant_tokens_carry_loss(tmp_path, tokenizer):
    turns = good_turns() + [[call("Bash", {"command": "python3 -m utils.verification"})]]
    records = [record(), record(conversation(turns, final="All checks pass."))]
    path = tmp_path / "sft.parquet"
    write_parquet(records, path)
    dataset = _dataset(path, tokenizer)
    assert len(dataset) == 2
    for index, rec in enumerate(records):
        item = dataset[index]
        length = int(item["attention_mask"].sum())
        ids = item["input_ids"][:length].tolist()
        mask = item["loss_mask"][:length].tolist()
        # the tools as parquet gives them back (each tool with the others' keys as nulls)
        expected_ids, expected_mask = _expected(tokenizer, rec.messages, dataset.tools[index])
        assert ids == expected_ids
        assert mask == expected_mask  # token by token
        assert int(item["loss_mask"][length:].sum()) == 0  # padding carries none
        assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == _assistant_text(rec.messages)


def _assistant_text(messages) -> str:
    """What the model generated: each assistant body, its calls (the JSON text as generated) and <|im_end|>."""
    parts = []
    for message in messages:
        if message["role"] == "assistant":
            calls = "".join(
                f'\n<tool_call>\n{{"name": "{c["function"]["name"]}", "arguments": {c["function"]["arguments"]}}}\n</tool_call>'
                for c in message.get("tool_calls", [])
            )
            parts.append(message["content"] + calls + "<|im_end|>\n")
    return "".join(parts)


def test_several_calls_in_one_turn_need_ignore_input_ids_mismatch(tmp_path, tokenizer):
    """Qwen-style templates put consecutive tool results in one user block; veRL renders each message
    alone, so the whole-conversation check fails unless ``ignore_input_ids_mismatch`` (our SFT config
    sets it). The loss mask is still exactly the assistant's tokens."""
    turns = [[call("Bash", {"command": "ls"}), call("Read", {"file_path": "a.py"})]]
    rec = record(conversation(turns, final="Done."))
    path = tmp_path / "sft.parquet"
    write_parquet([rec], path)
    with pytest.raises(AssertionError, match="ignore_input_ids_mismatch"):
        _dataset(path, tokenizer)[0]
    item = _dataset(path, tokenizer, ignore_mismatch=True)[0]
    ids = item["input_ids"].tolist()
    mask = item["loss_mask"].tolist()
    assert tokenizer.decode([t for t, m in zip(ids, mask) if m]) == _assistant_text(rec.messages)


def test_tools_are_rendered_into_the_prompt(tmp_path, tokenizer):
    path = tmp_path / "sft.parquet"
    write_parquet([record()], path)
    item = _dataset(path, tokenizer)[0]
    text = tokenizer.decode(item["input_ids"][item["loss_mask"] == 0].tolist())
    assert "<tools>" in text
    for name in ("Bash", "Write", "Read"):
        assert f'"name": "{name}"' in text

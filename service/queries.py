"""From an OpenRLHF query to the candidate's files.

OpenRLHF's ``query`` is the decoded prompt *and* response (special tokens kept). The prompt
quotes the reference and shows example blocks (```` ```python model_new.py ````), so it must
be cut off before the answer is parsed, or its examples would count as the candidate's
files. The answer is then parsed exactly as ``reward_fns/answer.py`` parses a single-turn
answer.
"""

from __future__ import annotations

import re

from cuda_agent.reward_fns.answer import ParsedAnswer, parse_answer

_SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_.:-]+\|>|</s>|<eos>|<end_of_turn>|<\|endoftext\|>")
_TAIL_CHARS = 256


def response_text(query: str, prompt: str | None) -> tuple[str, bool]:
    """(the response part of `query`, whether the prompt was found in it)."""
    if prompt:
        if query.startswith(prompt):
            return query[len(prompt):], True
        at = query.rfind(prompt)
        if at >= 0:
            return query[at + len(prompt):], True
        # decoding may not round-trip the prompt's start (BOS, spaces): find its end instead
        tail = prompt[-min(_TAIL_CHARS, max(16, len(prompt) // 2)):]
        at = query.rfind(tail)
        if at >= 0:
            return query[at + len(tail):], True
    return query, not prompt


def parse_query(query: str, prompt: str | None) -> tuple[ParsedAnswer, bool]:
    """The candidate files of one sample, and whether its prompt was found and cut off."""
    text, found = response_text(query, prompt)
    return parse_answer(_SPECIAL_TOKEN.sub("\n", text)), found

"""Which requests are an agent's own compaction call (`proxy.side_calls`): Claude Code's summary
prompt as the newest user text, whole or as the message's last text block."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.side_calls import COMPACTION_PROMPTS, is_compaction_call

PROMPT = (
    "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n" + COMPACTION_PROMPTS[0] + ", paying close attention"
)
BEFORE = [{"role": "user", "content": "step 0"}, {"role": "assistant", "content": "ok"}]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


@pytest.mark.parametrize(
    "last",
    [
        {"role": "user", "content": PROMPT},
        {"role": "user", "content": [text(PROMPT)]},
        {"role": "user", "content": [text("step 1"), text("[Request interrupted by user]"), text(PROMPT)]},
    ],
)
def test_the_compaction_prompt_as_the_newest_user_text(last: dict[str, Any]) -> None:
    assert is_compaction_call([*BEFORE, last])


@pytest.mark.parametrize(
    "history",
    [
        [{"role": "user", "content": PROMPT}],  # nothing before it to be a side call of
        [*BEFORE, {"role": "assistant", "content": PROMPT}],  # not the user's
        [*BEFORE, {"role": "user", "content": [text(PROMPT), text("and then this")]}],  # not the newest text
        [
            {"role": "user", "content": PROMPT},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "go"},
        ],
        [*BEFORE, {"role": "user", "content": "Summarize the conversation so far."}],  # another prompt
    ],
)
def test_what_is_not_a_compaction_call(history: list[dict[str, Any]]) -> None:
    assert not is_compaction_call(history)

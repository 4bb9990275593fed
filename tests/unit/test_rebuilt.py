"""Which history is an agent's rebuilt history after a recorded compaction call (`proxy.rebuilt`):
the framing in its first user message, and the call's recorded summary in it, exactly, within the
window; the summary is the answer's last `<summary>` block (else its text), 40 characters at least."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.rebuilt import MIN_SUMMARY_CHARS, REBUILT_FRAMES, WINDOW, carries, is_rebuilt, recorded_summary
from proxy.side_calls import PURPOSE
from proxy.store.base import CallRecord

SUMMARY = "1. Primary Request: migrate the billing tables.\n\n2. Key facts: the database lives on port 5433."
ANSWER = {"role": "assistant", "content": f"<analysis>draft</analysis>\n<summary>\n{SUMMARY}\n</summary>"}
FRAME = REBUILT_FRAMES[0] + " that ran out of context. The summary below covers the earlier portion."
NOW = 10_000.0


def call(answer: Any = ANSWER, **over: Any) -> CallRecord:
    fields: dict[str, Any] = {"purpose": PURPOSE, "status": "complete", "branch_id": "b_1", "response": answer}
    fields.update(over)
    return CallRecord(id="call_1", tenant="t_1", route="r", model="m", stream=False, started_at=NOW - 60, **fields)


def first(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_the_recorded_summary_is_the_last_summary_block_else_the_whole_text() -> None:
    assert recorded_summary(ANSWER) == " ".join(SUMMARY.split())
    twice = {"role": "assistant", "content": f"<summary>{'x' * 50}</summary> then <summary>{SUMMARY}</summary>"}
    assert recorded_summary(twice) == " ".join(SUMMARY.split())
    blocks = {"role": "assistant", "content": [{"type": "text", "text": SUMMARY}]}
    assert recorded_summary(blocks) == " ".join(SUMMARY.split())
    assert recorded_summary({"role": "assistant", "content": "<summary>too short</summary>"}) is None
    assert recorded_summary({"role": "assistant", "content": "y" * MIN_SUMMARY_CHARS}) == "y" * MIN_SUMMARY_CHARS
    assert recorded_summary(None) is None


def test_is_rebuilt_needs_the_framing_in_the_first_user_message() -> None:
    assert is_rebuilt([first(f"{FRAME}\n\nSummary:\n{SUMMARY}")])
    assert is_rebuilt([{"role": "user", "content": [{"type": "text", "text": FRAME}]}, first("next")])
    assert not is_rebuilt([first(f"Summary:\n{SUMMARY}")])
    assert not is_rebuilt([{"role": "assistant", "content": FRAME}])
    assert not is_rebuilt([first("hello"), first(FRAME)])
    assert not is_rebuilt([])


def test_the_summary_carried_exactly_with_its_blank_lines_rewrapped() -> None:
    assert carries(first(f"{FRAME}\n\nSummary:\n{SUMMARY}"), call(), NOW)
    assert carries(first(f"{FRAME}\nSummary:\n{SUMMARY.replace(chr(10) * 2, chr(10))}\n\nGo on."), call(), NOW)


@pytest.mark.parametrize(
    "text",
    [
        f"{FRAME}\n\nSummary:\n{SUMMARY.replace('5433', '5434')}",  # one word changed
        f"{FRAME}\n\nSummary:\n{SUMMARY[:-20]}",  # shortened
        f"{FRAME}\n\nSummary:\n{SUMMARY.lower()}",  # re-cased
        f"{FRAME}\n\nSummary: the billing tables were migrated; the database is on port 5433.",  # paraphrased
    ],
)
def test_a_summary_that_only_resembles_the_recorded_one_is_not_carried(text: str) -> None:
    assert not carries(first(text), call(), NOW)


@pytest.mark.parametrize(
    "over",
    [
        {"purpose": "main"},
        {"status": "partial"},
        {"branch_id": None},
        {"started_at": NOW - WINDOW - 1},  # too long ago
        {"started_at": NOW + 5},  # not yet
        {"response": {"role": "assistant", "content": "<summary>short</summary>"}},
    ],
)
def test_only_a_complete_recent_compaction_call_with_a_summary_is_continued(over: dict[str, Any]) -> None:
    record = call()
    for name, value in over.items():
        setattr(record, name, value)
    assert not carries(first(f"{FRAME}\n\nSummary:\n{SUMMARY}"), record, NOW)

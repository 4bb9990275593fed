"""The key lines of summarized tool results, carried by ctxproxy beside the summary.

A session whose tool results each print one line that breaks a long repetitive output (a value
the agent may need later), against a summarizer that keeps none of them. Through compaction after
compaction: the checkpoints carry those lines with their event ids after the summary, oldest
dropped first within the budget; the summarizer is never shown the section (it rolls the model's
own summary only) and is asked for a summary shorter by what the lines take; and the main model
receives the lines inside the summary block, as data.
"""

from __future__ import annotations

import re
from typing import Any

from policies.key_lines import HEADING
from tests.e2e.test_summary_injection import OBJECTIVE, SYSTEM, is_summary
from tests.support.e2e import active_checkpoint, chat_tool_loop
from tests.support.upstream_server import Reply, tool_call

MODEL = "gpt-keylines"
WINDOW = 6000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 500,
    "keep_recent_tokens": 1500,
    "summary_chunk_tokens": 2000,
    "overflow_wait": 20,
    "summarizer": {"timeout": 5, "max_attempts": 2},
}
LIMIT = WINDOW // 10  # the summary's length limit by default
SUMMARY = (
    "## Goal\nTidy the repository.\n## Constraints\nnone\n## Corrections\nnone\n## Decisions\nnone\n"
    "## Key facts\nnone\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue."
)


def output(turn: int) -> str:
    lines = [f"scan {turn}.{i} line nothing unusual in the module" for i in range(40)]
    lines.insert(20, f"port_{turn} = {41000 + turn}")
    return "\n".join(lines)


def test_checkpoints_carry_the_key_lines_the_summary_dropped(proxy, upstream, api_key, monkeypatch) -> None:
    monkeypatch.setitem(upstream.context_windows, MODEL, WINDOW)
    p = proxy(policies={"default": POLICY})
    summaries: list[str] = []

    def respond(body: dict[str, Any]) -> Reply | None:
        if is_summary(body):
            summaries.append(str(body["messages"][-1]["content"]))
            return Reply(content=SUMMARY)
        if body.get("model") != MODEL:
            return None
        if body["messages"][-1]["role"] == "user":
            return Reply(content=None, tool_calls=[tool_call("shell", {"cmd": "scan"})])
        return Reply(content="noted")

    upstream.responder = respond
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conversation = chat_tool_loop(
        p.client(api_key), MODEL, messages, 16, lambda turn: f"turn {turn}: keep going " + "filler " * 40, output
    )

    checkpoint = active_checkpoint(p, conversation)
    text = checkpoint["summary"]
    assert text.startswith(SUMMARY + "\n\n" + HEADING + "\n"), text
    carried = re.findall(r"^- \[e(\d+) shell\] port_(\d+) = (\d+)$", text, re.M)
    assert carried, text
    turns = [int(turn) for _, turn, _ in carried]
    assert turns == sorted(turns) and all(int(value) == 41000 + int(t) for _, t, value in carried)
    assert any("<previous_summary>" in s for s in summaries)  # rolled over a checkpoint with key lines...
    assert not any("Key lines of tool output" in s for s in summaries)  # ...the summarizer saw its own text only
    asked = [int(m.group(1).replace(",", "")) for s in summaries if (m := re.search(r"under ([\d,]+) tokens", s))]
    assert len(asked) == len(summaries) and max(asked) <= LIMIT and min(asked) < LIMIT  # the lines take their share
    sent = [
        str(m.get("content"))
        for r in upstream.chat_requests
        if r.body.get("model") == MODEL
        for m in r.body["messages"]
        if m.get("role") == "user" and "<conversation_summary" in str(m.get("content"))
    ]
    assert any(f"port_{turns[-1]} = {41000 + turns[-1]}" in block for block in sent)

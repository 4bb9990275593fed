"""`Wire.answers_in_text`: whether a request's tool choice lets the model answer with text alone.

A shared summary (`proxy.shared_summary`) repeats the branch's last request, tool choice and all
(changing it would miss the prompt cache), so under a choice that forces a tool call the model
cannot write the summary and the call is not made. Each API's own values, as its reference
documents them.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.protocols import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from proxy.protocols.base import Wire

ALLOWED = [{"type": "function", "name": "bash"}]
CASES: list[tuple[Wire, Any, bool]] = [
    (OPENAI_CHAT, None, True),
    (OPENAI_CHAT, "auto", True),
    (OPENAI_CHAT, "none", True),
    (OPENAI_CHAT, "required", False),
    (OPENAI_CHAT, {"type": "function", "function": {"name": "bash"}}, False),
    (OPENAI_CHAT, {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": ALLOWED}}, True),
    (OPENAI_CHAT, {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": ALLOWED}}, False),
    (OPENAI_RESPONSES, "required", False),
    (OPENAI_RESPONSES, {"type": "function", "name": "bash"}, False),
    (OPENAI_RESPONSES, {"type": "file_search"}, False),
    (OPENAI_RESPONSES, {"type": "allowed_tools", "mode": "auto", "tools": ALLOWED}, True),
    (OPENAI_RESPONSES, {"type": "allowed_tools", "mode": "required", "tools": ALLOWED}, False),
    (ANTHROPIC, {"type": "auto", "disable_parallel_tool_use": True}, True),
    (ANTHROPIC, {"type": "none"}, True),
    (ANTHROPIC, {"type": "any"}, False),
    (ANTHROPIC, {"type": "tool", "name": "bash"}, False),
]


@pytest.mark.parametrize(("wire", "choice", "text"), CASES, ids=lambda v: repr(v)[:40])
def test_a_tool_choice_that_forces_a_call_leaves_no_text_answer(wire: Wire, choice: Any, text: bool) -> None:
    body: dict[str, Any] = {"model": "m", "tools": [{"type": "function", "name": "bash"}]}
    if choice is not None:
        body["tool_choice"] = choice
    assert wire.answers_in_text(body) is text


@pytest.mark.parametrize(
    ("mode", "text"), [(None, True), ("AUTO", True), ("VALIDATED", True), ("NONE", True), ("ANY", False)]
)
def test_gemini_forces_a_call_in_mode_any(mode: str | None, text: bool) -> None:
    calling = {"mode": mode, "allowedFunctionNames": ["bash"]} if mode else {}
    body = {"contents": [], "toolConfig": {"functionCallingConfig": calling}}
    assert GEMINI.answers_in_text(body) is text
    assert GEMINI.answers_in_text({"contents": []})

"""The recall tool's result for one call: search hits or one stored event, bounded.

Results are delimited data (`<conversation_history_search>`, `policies.search.render`), never
instructions; hits come in history order, each with its event number, and when more match than
fit the newest are kept and the rest counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from policies.search import SearchableEvent, fit_newest, parse_query, render, render_event, search
from policies.text import call_arguments, call_name, tool_calls

from ..config import Recall
from ..types import Message

CHARS_PER_TOKEN = 4
"""Event texts are cut by characters; results are fitted by the route's tokenizer."""


def recall_calls(message: Message | None, settings: Recall) -> list[Mapping[str, Any]]:
    """The answer's calls of the recall tool (client tool calls beside them are dropped)."""
    if message is None:
        return []
    return [call for call in tool_calls(message) if call_name(call) == settings.tool_name]


def answer(
    events: Sequence[SearchableEvent], call: Mapping[str, Any], settings: Recall, count: Callable[[str], int]
) -> str:
    """The tool result for one recall call: search results or one event, bounded."""
    try:
        arguments = json.loads(call_arguments(call) or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return "Error: the arguments must be a JSON object with a string `query`."
    event = arguments.get("event")
    if isinstance(event, int) and not isinstance(event, bool):
        return render_event(events, event, settings.max_result_tokens * CHARS_PER_TOKEN)
    text = arguments.get("query")
    try:
        query = parse_query(text if isinstance(text, str) else "")
    except ValueError as exc:
        return f"Error: {exc}"
    fitted = fit_newest(search(events, query), settings.max_result_tokens, count)
    return render(text if isinstance(text, str) else "", fitted)

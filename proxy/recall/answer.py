"""The recall tool's result for one call: search hits or one stored event, bounded.

Results are delimited data (`<conversation_history_search>`, `policies.search.render`), never
instructions; hits come in history order, each with its event number, and when more match than
fit the newest are kept and the rest counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from policies.search import SearchableEvent, fit_newest, parse_query, render, render_event, search

from ..tool_settings import Recall
from .tool import definition
from .toolbox import ProxyTool, arguments_of

CHARS_PER_TOKEN = 4
"""Event texts are cut by characters; results are fitted by the route's tokenizer."""


def recall(settings: Recall) -> ProxyTool:
    """The recall tool as one of the request's proxy tools."""

    async def answered(
        call: Mapping[str, Any], events: Sequence[SearchableEvent], count: Callable[[str], int], limit: int | None
    ) -> str:
        return answer(events, call, settings, count, limit)

    return ProxyTool(settings.tool_name, lambda wire: definition(wire, settings), answered)


NO_ROOM = (
    "Error: the context window has no room left for recall results in this answer; "
    "answer with what you have, or ask for less."
)
MIN_RESULT_TOKENS = 64


def answer(
    events: Sequence[SearchableEvent],
    call: Mapping[str, Any],
    settings: Recall,
    count: Callable[[str], int],
    limit: int | None = None,
) -> str:
    """The tool result for one recall call: search results or one event, within `limit` tokens
    (default `max_result_tokens`; less when the window has less room left)."""
    limit = settings.max_result_tokens if limit is None else min(limit, settings.max_result_tokens)
    if limit < MIN_RESULT_TOKENS:
        return NO_ROOM
    arguments = arguments_of(call)
    if arguments is None:
        return "Error: the arguments must be a JSON object with a string `query`."
    event = arguments.get("event")
    if isinstance(event, int) and not isinstance(event, bool):
        offset = arguments.get("offset", 0)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            return "Error: `offset` must be a non-negative integer (a cut event's marker names it)."
        return _fitted_event(events, event, limit, count, offset)
    text = arguments.get("query")
    try:
        query = parse_query(text if isinstance(text, str) else "")
    except ValueError as exc:
        return f"Error: {exc}"
    fitted = fit_newest(search(events, query), limit, count)
    return render(text if isinstance(text, str) else "", fitted)


def _fitted_event(
    events: Sequence[SearchableEvent], seq: int, limit: int, count: Callable[[str], int], offset: int = 0
) -> str:
    """One event from character `offset` on, cut by characters until the tokenizer says it fits
    (digits and symbols take more tokens per character than prose); a cut one's marker names the
    offset that reads on."""
    chars = limit * CHARS_PER_TOKEN
    text = render_event(events, seq, chars, offset)
    for _ in range(4):
        used = count(text)
        if used <= limit:
            break
        chars = int(chars * limit / used * 0.9)
        text = render_event(events, seq, chars, offset)
    return text

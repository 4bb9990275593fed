"""Reading a Responses response object: its output as a common message, how it ended, its text."""

from __future__ import annotations

from typing import Any

from ...types import Json, Message, as_list
from .convert import assistant_message, items_to_messages
from .items import item_type


def output_message(output: Any) -> Message | None:
    """A response's `output` items as one common assistant message (None when empty)."""
    if not isinstance(output, list):
        return None
    items = [i for i in output if isinstance(i, dict)]
    if not items:
        return None
    messages = items_to_messages(items)
    if len(messages) == 1:
        return messages[0]
    # Unusual output (e.g. an item that is not assistant-side): keep it all in one turn.
    return assistant_message(items)


def finish_of(response: Json) -> str | None:
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return f"incomplete:{reason}" if reason else "incomplete"
    return status if isinstance(status, str) else None


def output_text(response: Json) -> str | None:
    if isinstance(response.get("output_text"), str):
        return str(response["output_text"])
    texts = []
    for item in as_list(response.get("output")):
        if isinstance(item, dict) and item_type(item) == "message":
            for part in as_list(item.get("content")):
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return "".join(texts) if texts else None

"""An agent's own compaction call, recognized by its summary prompt (pure).

Claude Code's `/compact` (and its auto-compaction) sends the session's history with its summary
instructions as the newest user text: a new user message after the last answer, or, when the
history ends with a user message (a turn the user interrupted), a second text block of that
message, the cache marker moved onto it. Stored as a turn, that request would add the prompt and
the summary to the session's line or fork a branch at its end. It is a side call instead
(`ingest`): recorded and billed with purpose `client_compaction` on the branch its history
continues, nothing appended; the history the agent rebuilds from the summary continues the
session as its next branch, after this call (`proxy.rebuilt`).

Recognized when the newest message is a user message whose last text (its string, or its last
text part) contains one of COMPACTION_PROMPTS. Risk: a user who types that sentence as a prompt
gets the turn recorded as the agent's compaction; its messages are not stored then, but the next
request, which carries them, appends them where they belong (nothing forks).
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import Message

COMPACTION_PROMPTS: tuple[str, ...] = (
    # Claude Code's compaction prompt (`/compact` and auto-compaction)
    "Your task is to create a detailed summary of the conversation so far",
)
PURPOSE = "client_compaction"


def last_text(message: Message) -> str | None:
    """The message's last text: its string content or its last text part's text."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for part in reversed(content):
            if isinstance(part, dict) and part.get("type") in ("text", "input_text"):
                text = part.get("text")
                return text if isinstance(text, str) else None
    return None


def is_compaction_call(history: Sequence[Message]) -> bool:
    """Whether the request whose history this is asks for the agent's own compaction."""
    if len(history) < 2 or not isinstance(history[-1], dict) or history[-1].get("role") != "user":
        return False
    text = last_text(history[-1])
    return text is not None and any(prompt in text for prompt in COMPACTION_PROMPTS)

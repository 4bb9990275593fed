"""The history an agent rebuilds after its own compaction, joined to the line it continues.

After Claude Code's `/compact` (or auto-compaction), recorded as a side call of purpose
`client_compaction` (`proxy.side_calls`), the agent sends a fresh, short history: its first user
message frames the summary the compaction call got ("This session is being continued from a
previous conversation that ran out of context. ..." and the summary), then the next prompt.
Nothing of it is stored, so identity alone would fork a branch from the session's start or
found a new conversation. This module recognizes that history and names the compaction call it
continues, so `ingest` appends it as the session's next branch, forked from the compaction's
branch before its first event (it inherits none of the old events) and linked to the call by
its first event's `call_id`: the event carries that call's answer, the summary.

The rule, all of it required:
- the request names an agent session (`identify.Session`, tenant-scoped: its conversation is
  the tenant's) and its history matched nothing stored;
- its first message is a user message whose text contains one of REBUILT_FRAMES;
- one of the session's recorded `client_compaction` calls (the newest of each of the session
  conversation's LINE_BRANCHES most recently active branches), complete and started within
  WINDOW seconds, has a recorded summary of at least MIN_SUMMARY_CHARS characters that the
  first message's text contains exactly (whitespace runs compared as one space: Claude Code
  re-wraps blank lines). The recorded summary is the upstream's answer to that call as the call
  record keeps it: the text of its last `<summary>...</summary>` block, or its whole text when
  it has none, stripped.
The newest such call wins. False-positive risk: a summary is the model's long answer to one
history; another session of the tenant, another tenant, or a first message that paraphrases,
shortens or edits the summary never matches; a user who pastes an earlier compaction's summary
with the framing into the same session within the window joins the line (as that compaction's
continuation), which is what the agent itself does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from . import side_calls
from .store.base import CallRecord, Position, Store
from .types import Message

REBUILT_FRAMES: tuple[str, ...] = (
    # Claude Code's framing of the summary in the history it rebuilds
    "This session is being continued from a previous conversation",
)
WINDOW = 24 * 3600.0
"""Seconds after its compaction call within which a rebuilt history joins the line (an
interactive `/compact` is followed by the user's next prompt, possibly much later)."""
MIN_SUMMARY_CHARS = 40
"""A recorded summary shorter than this links nothing: too short to be unique."""
LINE_BRANCHES = 4
"""How many of the session conversation's most recently active branches are asked for their
newest compaction call (one read each)."""

_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)
_SPACE = re.compile(r"\s+")


def _texts(message: Message) -> Iterable[str]:
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                text = part.get("text")
                if isinstance(text, str):
                    yield text


def _text(message: Message) -> str:
    return "\n".join(_texts(message))


def _squeezed(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def is_rebuilt(history: list[Message]) -> bool:
    """Whether the history opens as an agent's rebuilt history: a user message with a frame."""
    if not history or not isinstance(history[0], dict) or history[0].get("role") != "user":
        return False
    text = _text(history[0])
    return any(frame in text for frame in REBUILT_FRAMES)


def recorded_summary(answer: Message | None) -> str | None:
    """The summary a compaction call's recorded answer carries (module docstring), None when it
    is shorter than MIN_SUMMARY_CHARS."""
    if not isinstance(answer, dict):
        return None
    text = _text(answer)
    blocks = _SUMMARY.findall(text)
    summary = _squeezed(blocks[-1] if blocks else text)
    return summary if len(summary) >= MIN_SUMMARY_CHARS else None


def carries(first: Message, call: CallRecord, now: float) -> bool:
    """Whether the rebuilt history's first message carries this compaction call's summary."""
    if call.purpose != side_calls.PURPOSE or call.status != "complete" or not call.branch_id:
        return False
    if not 0 <= now - call.started_at <= WINDOW:
        return False
    summary = recorded_summary(call.response)
    return summary is not None and summary in _squeezed(_text(first))


async def continued(
    store: Store, tenant: str, session_ref: str, first: Message, now: float
) -> tuple[Position, str] | None:
    """Where a rebuilt history of the tenant's session starts -- the compaction call's branch,
    before its first event (`Store.append` forks there) -- and that call's id; None when no
    recorded compaction call of the session matches (module docstring)."""
    conversation = await store.find_conversation(tenant, session_ref)
    if conversation is None or conversation.tenant != tenant:
        return None
    branches = sorted(await store.list_branches(conversation.id), key=lambda b: b.updated_at, reverse=True)
    found: list[tuple[float, str, str]] = []
    for branch in branches[:LINE_BRANCHES]:
        call = await store.last_call(branch.id, side_calls.PURPOSE)
        if call is not None and call.tenant == tenant and carries(first, call, now):
            found.append((call.started_at, call.branch_id or branch.id, call.id))
    if not found:
        return None
    _, branch_id, call_id = max(found)
    return Position(conversation.id, branch_id, 0), call_id

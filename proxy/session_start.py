"""Where a request of an agent session starts when its history matched nothing stored.

`ingest` resolves a request by its history first. A request that names an agent session (a
configured session header, e.g. Claude Code's `x-claude-code-session-id`: `identify.Session`,
tenant-scoped) and matched nothing is not a new conversation: the agent rebuilt its history
(its own compaction: "This session is being continued from a previous conversation..."), and
the request continues the session's conversation as a new branch. Two rules, in this order:

* the rebuilt history carries the summary a recorded compaction call of the session got
  (`proxy.rebuilt`): it continues that call's line, forked from the compaction's branch before
  its first event, its first event's `call_id` the compaction call's;
* otherwise the session's main loop (the same tool definitions as the session's last main
  call) continues the session's conversation as a new branch forked at its start. The
  session's first request with tools founds the conversation (external id
  `session:<digest>`); a request with other tools or none (a title or classification side
  call) gets no start here, so `ingest` gives it its own conversation: it never forks the main
  line nor becomes it, and never founds the session's.

Example: a Claude Code session's main loop sends [u1, a1, u2], then after a `/compact` a fresh
[summary framing, u3]; nothing of the second is stored, so it lands here: its first message
carries the compaction call's recorded summary, and it becomes that call's branch.
"""

from __future__ import annotations

import time

from . import identify, rebuilt
from .store.base import Position, Store
from .types import Message


async def session_start(
    store: Store, tenant: str, session: identify.Session, history: list[Message]
) -> tuple[Position, bool, str | None] | None:
    """Where the session's request whose history matched nothing starts, whether that created
    the session's conversation, and the compaction call its rebuilt history continues (None:
    none); None when neither rule applies (a side call, see the module docstring)."""
    if session.tools is not None and rebuilt.is_rebuilt(history):
        line = await rebuilt.continued(store, tenant, session.ref, history[0], time.time())
        if line is not None:
            start, continues = line
            return start, False, continues
    resumed = await _conversation_start(store, tenant, session)
    if resumed is None:
        return None
    start, created = resumed
    return start, created, None


async def _conversation_start(store: Store, tenant: str, session: identify.Session) -> tuple[Position, bool] | None:
    """The start of the session's conversation (a new branch once appended), with whether it was
    just created; None for a side call (see the module docstring)."""
    if session.tools is None:
        return None
    conversation = await store.find_conversation(tenant, session.ref)
    if conversation is None:
        conversation = await store.create_conversation(tenant, session.ref)
        return Position(conversation.id, conversation.main_branch_id, 0), True
    last = await store.last_call(conversation.main_branch_id, "main")
    if last is None or last.tools_hash != session.tools:
        return None
    return Position(conversation.id, conversation.main_branch_id, 0), False

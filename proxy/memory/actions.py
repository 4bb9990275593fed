"""The memory tool's actions against the store: search, save, update, forget (and approve, for
operators).

Rules (seed 003: conflicts by evidence, not last-write-wins; "frequency is not truth"):

* `save`: the text loses every link the conversation's user/assistant/system text does not hold
  (`evidence.without_links`); it is `active` when that text holds it, `unconfirmed` when only tool
  output does, `pending` under `write: confirm` whatever the evidence. Saved again (same text,
  same scope), a memory is confirmed once more instead of duplicated, and a user-stated save
  promotes an unconfirmed one. A save whose `subject:` matches a current memory of the scope
  with another value supersedes it only when the user stated it (the text is in a user
  message); otherwise both stay, and the injection says they conflict.
* `update`: a new record superseding the old one (its history stays visible to operators),
  unless the new text was seen only in tool output: then both stay, the new one unconfirmed.
* `forget`: the text is emptied and the record stays a `forgotten` tombstone (who, when, from
  where); it is never injected or found again. Operators delete for good (admin API).
* Every read and write names the request's tenant; an id from another tenant or outside the
  request's scopes is "not found".

Under `write: confirm` a pending save or update keeps the ids it would supersede
(`source.supersedes`); `approve` applies them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.search import parse_query

from ..store.base import Store, StoredEvent
from ..store.memories import CURRENT, LISTED, Memory, new_memory_id, newest_first, superseded_by
from ..tool_settings import Memory as Settings
from ..types import Message
from . import evidence, render
from .scopes import Scopes

MAX_TEXT_CHARS = 1000
Count = Callable[[str], int]


@dataclass(frozen=True)
class Actor:
    """Who acts on memory in one request: the store, the route's settings, the tenant, the
    request's scopes, the conversation and branch it happens in, its system prompt."""

    store: Store
    settings: Settings
    tenant: str
    scopes: Scopes
    conversation_id: str | None
    branch_id: str | None
    prefix: Sequence[Message] = ()
    clock: Callable[[], float] = time.time


async def act(
    actor: Actor, arguments: Mapping[str, Any], events: Sequence[StoredEvent], count: Count, limit: int
) -> str:
    action = arguments.get("action")
    if action == "search":
        return await search(actor, str(arguments.get("query") or ""), count, limit)
    if action == "save":
        return await save(actor, arguments.get("text"), arguments.get("scope"), events)
    if action == "update":
        return await update(actor, str(arguments.get("id") or ""), arguments.get("text"), events)
    if action == "forget":
        return await forget(actor, str(arguments.get("id") or ""))
    return "Error: `action` must be one of search, save, update, forget."


async def search(actor: Actor, query: str, count: Count, limit: int) -> str:
    try:
        terms = parse_query(query).terms if query.strip() else ()
    except ValueError as exc:
        return f"Error: {exc}"
    listed = [m for m in await _memories(actor) if m.status in LISTED]
    found = [m for m in listed if all(term in m.text.lower() for term in terms)]
    if not found and terms:  # nothing has every word: the memories with most of them
        scored = [(sum(term in m.text.lower() for term in terms), m) for m in listed]
        best = max((score for score, _ in scored), default=0)
        found = [m for score, m in scored if best and score == best]
    lines, left = render.fit([render.describe(m) for m in newest_first(found)], limit - 64, count)
    if not lines:
        return render.results("search", [], f"No memory matches {query!r} in scopes {', '.join(actor.scopes.names)}.")
    note = f"{len(found)} found, newest first" + (f"; {left} more not shown (narrow the query)" if left else "")
    return render.results("search", lines, note)


async def save(actor: Actor, text: Any, scope_kind: Any, events: Sequence[StoredEvent]) -> str:
    problem = _text_problem(text)
    if problem:
        return problem
    kind = scope_kind if isinstance(scope_kind, str) and scope_kind else actor.scopes.default.split(":", 1)[0]
    scope = actor.scopes.of(kind) if kind in actor.settings.scopes else None
    if scope is None:
        return f"Error: this conversation has no {kind!r} memory scope; its scopes: {', '.join(actor.scopes.names)}."
    new, notes = _drafted(actor, str(text).strip(), scope, events)
    current = [m for m in await _memories(actor) if m.scope == scope and m.status in CURRENT]
    same = next((m for m in current if evidence.same_text(m.text, new.text)), None)
    if same is not None:
        return await _confirm(actor, same, new)
    if len(current) >= actor.settings.max_per_scope:
        return f"Error: scope {scope} holds {len(current)} memories, its limit; update or forget one first."
    key = evidence.subject(new.text)
    rivals = [m for m in current if key is not None and evidence.subject(m.text) == key and m.status != "pending"]
    stated = new.source.get("role") == "user" and new.source.get("seen_in") == "text"
    return await _write(actor, new, rivals, notes, replace_all=stated)


async def update(actor: Actor, memory_id: str, text: Any, events: Sequence[StoredEvent]) -> str:
    problem = _text_problem(text)
    if problem:
        return problem
    old = await _own(actor, memory_id)
    if old is None:
        return f"Error: no current memory {memory_id!r} in this conversation's scopes."
    new, notes = _drafted(actor, str(text).strip(), old.scope, events)
    return await _write(actor, new, [old], notes, replace_all=True)


async def forget(actor: Actor, memory_id: str) -> str:
    old = await _own(actor, memory_id)
    if old is None:
        return f"Error: no current memory {memory_id!r} in this conversation's scopes."
    now = actor.clock()
    source = {**old.source, "forgotten_in": actor.conversation_id}
    gone = dataclasses.replace(old, status="forgotten", text="", source=source, listed_until=now, updated_at=now)
    if not await actor.store.replace_memory(gone, old.updated_at):
        return f"Error: memory {memory_id} changed meanwhile; search and try again."
    return render.results("forget", [], f"Forgot {memory_id}: it will not be injected or found again.")


async def approve(store: Store, memory: Memory, now: float) -> Memory | None:
    """An operator's approval of a pending or unconfirmed memory: active from `now`, superseding
    what a pending save or update would have (`source.supersedes`); None when it changed meanwhile."""
    source = {key: value for key, value in memory.source.items() if key != "supersedes"}
    listed_from = memory.listed_from
    if listed_from is None:  # pending: listed from now on
        listed_from = now
    else:  # unconfirmed: listed already, under its heading until now (earlier blocks keep it so)
        source["unconfirmed_until"] = now
    approved = dataclasses.replace(memory, status="active", listed_from=listed_from, updated_at=now, source=source)
    if not await store.replace_memory(approved, memory.updated_at):
        return None
    for old_id in memory.source.get("supersedes") or []:
        old = await store.get_memory(str(old_id))
        if old is not None and old.tenant == memory.tenant and old.scope == memory.scope and old.status in CURRENT:
            await store.replace_memory(superseded_by(old, approved), old.updated_at)
    return approved


async def extract(actor: Actor, facts: Sequence[tuple[str, int]], events: Sequence[StoredEvent]) -> int:
    """A compaction's durable facts (text, event id) as `unconfirmed` candidates in the request's
    default scope, written by `extraction`: links cut, a text already there (or already a candidate)
    skipped, a fact whose event is not the branch's skipped. How many were saved."""
    scope = actor.scopes.default
    current = [m for m in await _memories(actor) if m.scope == scope and m.status in CURRENT]
    by_seq = {event.seq: event for event in events}
    saved = 0
    for text, seq in facts:
        event = by_seq.get(seq)
        if event is None or _text_problem(text) or any(evidence.same_text(m.text, text) for m in current):
            continue
        draft, _ = _drafted(actor, text, scope, events)
        source = {**draft.source, "seq": seq, "role": event.role, "branch_id": event.branch_id}
        memory = dataclasses.replace(
            draft, status="unconfirmed", writer="extraction", source=source, listed_from=draft.created_at
        )
        if len(current) < actor.settings.max_per_scope and await actor.store.save_memory(memory):
            current.append(memory)
            saved += 1
    return saved


def _text_problem(text: Any) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return "Error: `text` must be a non-empty string."
    if len(text) > MAX_TEXT_CHARS:
        return f"Error: `text` is {len(text)} characters; a memory holds at most {MAX_TEXT_CHARS}: save one fact."
    return None


def _drafted(actor: Actor, text: str, scope: str, events: Sequence[StoredEvent]) -> tuple[Memory, list[str]]:
    """The new record for `text` in `scope` (not stored yet), and what to tell the model about it."""
    now = actor.clock()
    trusted = evidence.trusted_text(events, actor.prefix)
    cleaned, removed = evidence.without_links(text, trusted)
    weighed = evidence.weigh(text, events, actor.prefix)
    notes = [f"Removed {len(removed)} link(s) not stated by the user or assistant."] if removed else []
    if actor.settings.write == "confirm":
        status = "pending"
        notes.append("Pending: an operator approves memories on this route before they are used.")
    elif weighed.seen_in == "tool_output":
        status = "unconfirmed"
        notes.append("Unconfirmed: this was seen only in tool output; ask the user to confirm it.")
    else:
        status = "active"
    memory = Memory(
        id=new_memory_id(actor.tenant),
        tenant=actor.tenant,
        scope=scope,
        text=cleaned,
        status=status,
        writer="model",
        source={**weighed.source(actor.conversation_id), "branch_id": weighed.branch_id or actor.branch_id},
        created_at=now,
        updated_at=now,
        confirmed_at=now,
        confirmed_times=(now,),
        listed_from=now if status in LISTED else None,
    )
    return memory, notes


async def _write(actor: Actor, new: Memory, rivals: list[Memory], notes: list[str], replace_all: bool) -> str:
    """Store `new`; supersede `rivals` when the evidence allows (`replace_all` and `new` is not
    from tool output), else keep them and say they conflict."""
    supersede = rivals if replace_all and new.status != "unconfirmed" else []
    if new.status == "pending" and supersede:
        new = dataclasses.replace(new, source={**new.source, "supersedes": [m.id for m in supersede]})
        notes.append(f"Once approved it replaces {', '.join(m.id for m in supersede)}.")
        supersede = []
    first = supersede[0] if supersede else None
    if not await actor.store.save_memory(new, first):
        return "Error: a memory changed meanwhile; search and try again."
    for other in supersede[1:]:
        await actor.store.replace_memory(superseded_by(other, new), other.updated_at)
    if supersede:
        notes.append(f"Replaces {', '.join(m.id for m in supersede)} (now superseded).")
    elif rivals and new.status != "pending":
        notes.append(f"Conflicts with {', '.join(m.id for m in rivals)}: both kept; ask the user which holds.")
    return render.results("save", [render.describe(new)], " ".join([f"Saved {new.id} ({new.status}).", *notes]))


async def _confirm(actor: Actor, same: Memory, new: Memory) -> str:
    confirmed = same.confirmed(new.created_at)
    if same.status == "unconfirmed" and new.status == "active":
        source = {**new.source, "unconfirmed_until": new.created_at}
        confirmed = dataclasses.replace(confirmed, status="active", source=source)
    if not await actor.store.replace_memory(confirmed, same.updated_at):
        return f"Error: memory {same.id} changed meanwhile; search and try again."
    note = f"Already saved as {same.id}; confirmed ({confirmed.confirmations} times)."
    return render.results("save", [render.describe(confirmed)], note)


async def _memories(actor: Actor) -> list[Memory]:
    return await actor.store.scope_memories(actor.tenant, actor.scopes.names)


async def _own(actor: Actor, memory_id: str) -> Memory | None:
    """The memory `memory_id` when it is current, the tenant's, in one of the request's scopes."""
    memory = await actor.store.get_memory(memory_id) if memory_id else None
    if memory is None or memory.tenant != actor.tenant or memory.scope not in actor.scopes.names:
        return None
    return memory if memory.status in CURRENT else None

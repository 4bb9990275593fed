"""Identify the conversation a request continues and append what is new (DESIGN steps 2-3).

The hashing rules live in `identify` (pure); this module asks the store. Resolution:

* explicit `X-Conversation-Id`: the tenant's conversation with that id (internal or the client's
  own), created on first use; the longest stored prefix inside it decides the branch.
* implicit: the tenant's longest stored prefix decides. A match of a single message counts only
  when the system prefix is also unchanged (an exact retry of a first turn); otherwise two
  sessions that merely open with the same "hi" would be merged.

The append is idempotent: re-sent messages whose chain hash is stored only move the position,
and the first new message after a non-head position forks a branch there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import identify
from .errors import BadRequest
from .store.base import NewEvent, Position, Store
from .types import Identity, Message

_EXTERNAL_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,200}$")


@dataclass(frozen=True)
class Ingested:
    identity: Identity
    position: Position
    """The last stored event of this request's history (where the response will be appended)."""
    prefix: list[Message]
    history: list[Message]
    hashes: list[str]
    system_hash: str


async def ingest(
    store: Store,
    tenant: str,
    prefix: list[Message],
    history: list[Message],
    hashes: list[str],
    explicit: str | None,
) -> Ingested:
    """`prefix`/`history` as split by `identify.split_prefix`; `hashes` is their identity chain."""
    system_hash = identify.prefix_hash(prefix)
    created = False
    if explicit is not None:
        if not _EXTERNAL_ID.match(explicit):
            raise BadRequest(
                "The X-Conversation-Id header must be 1-200 characters of letters, digits and ._:@/+=-",
                param="X-Conversation-Id",
            )
        conversation = await store.find_conversation(tenant, explicit)
        if conversation is None:
            conversation = await store.create_conversation(tenant, explicit)
            created = True
        match = await store.find_longest(hashes, tenant, conversation.id)
        start = match.position if match else Position(conversation.id, conversation.main_branch_id, 0)
        matched = match.count if match else 0
        external = conversation.external_id
    else:
        match = await store.find_longest(hashes, tenant, None)
        if match is not None and (match.count >= 2 or match.system_hash == system_hash):
            start, matched = match.position, match.count
        else:
            conversation = await store.create_conversation(tenant, None)
            start, matched, created = Position(conversation.id, conversation.main_branch_id, 0), 0, True
        external = None
    new = [
        NewEvent(role=str(m.get("role")), message=m, chain_hash=h, source="request")
        for m, h in zip(history[matched:], hashes[matched:], strict=True)
    ]
    position = await store.append(start, new, system_hash)
    identity = Identity(
        tenant=tenant,
        conversation_id=position.conversation_id,
        branch_id=position.branch_id,
        matched=matched,
        external_id=external,
        created=created,
        forked=position.branch_id != start.branch_id,
    )
    return Ingested(identity, position, prefix, history, hashes, system_hash)


async def append_response(store: Store, ingested: Ingested, message: Message, call_id: str) -> Position:
    parent = ingested.hashes[-1] if ingested.hashes else identify.root_hash(ingested.identity.tenant)
    event = NewEvent(
        role="assistant",
        message=message,
        chain_hash=identify.message_hash(parent, message),
        source="response",
        call_id=call_id,
    )
    return await store.append(ingested.position, [event], None)

"""Long-term memory records: what an agent learned, kept across conversations, with provenance.

A memory belongs to one tenant and one scope (`tenant`, `project:<key>`, `user:<client name>`);
nothing reads across tenants: every read of the request path names its tenant, and the admin
API's reads by id show the tenant they found. A memory is never rewritten in place by a model:
a correction is a new record that supersedes the old one (`status: superseded`,
`superseded_by`), so the history of a value stays visible to operators. `forget` empties the
text and keeps the tombstone (who, when, from where); a delete leaves nothing in any store.

When a memory may be injected into a conversation is a window of time: `listed_from` (it became
active or unconfirmed: saved, approved) to `listed_until` (superseded or forgotten). A
conversation's injection block is rendered for one instant (its start, then each checkpoint),
so the block stays byte-identical between checkpoints whatever other conversations save
meanwhile (`proxy.memory.inject`).

Ids carry their tenant's tag (`m_` + 2 hex digits of the tenant's hash + 14 random ones), so the
Redis layout finds a record by id in its tenant's slot without an index.

Example: `save "deploy target: staging-2"` in conversation c_1 event 7, user-stated ->
Memory(id="m_3fa1...", scope="project:/srv/app", text="deploy target: staging-2",
status="active", writer="model", source={"conversation_id": "c_1", "seq": 7, "role": "user",
"seen_in": "text", ...}).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .public import PublicRecord

STATUSES = ("active", "unconfirmed", "pending", "superseded", "forgotten")
CURRENT = ("active", "unconfirmed", "pending")
"""A memory that still stands: it can be confirmed, updated, superseded or forgotten."""
LISTED = ("active", "unconfirmed")
"""A memory the model may see: injected (unconfirmed ones under their own heading) and searched."""
WRITERS = ("model", "operator", "extraction")
KEPT_CONFIRMATIONS = 16


def memory_tag(tenant: str) -> str:
    """Two hex digits of the tenant's hash: its memories' Redis Cluster slot."""
    return hashlib.sha256(("memory:" + tenant).encode("utf-8", "surrogatepass")).hexdigest()[:2]


def new_memory_id(tenant: str) -> str:
    return "m_" + memory_tag(tenant) + secrets.token_hex(7)


def tag_of_memory(memory_id: str) -> str | None:
    """The tag a memory id carries, None when it is no memory id."""
    if len(memory_id) != 18 or not memory_id.startswith("m_"):
        return None
    digits = memory_id[2:]
    return digits[:2] if all(c in "0123456789abcdef" for c in digits) else None


@dataclass(frozen=True)
class Memory(PublicRecord):
    id: str
    tenant: str
    scope: str
    text: str
    status: str
    writer: str
    source: dict[str, Any]
    """conversation_id, branch_id, seq (the event the text came from), role, seen_in (`text`: it
    appears in user or assistant text; `tool_output`: only in tool output; `none`: nowhere, the
    model's own words; `operator`), and for operator writes, nothing else"""
    created_at: float
    updated_at: float
    confirmed_at: float
    confirmations: int = 1
    confirmed_times: tuple[float, ...] = ()
    """the first `KEPT_CONFIRMATIONS` confirmation times (the save included): how confirmed the
    memory was at any instant, which orders an injection block without ever reordering it"""
    listed_from: float | None = None
    listed_until: float | None = None
    superseded_by: str | None = None

    public = (
        "id",
        "tenant",
        "scope",
        "text",
        "status",
        "writer",
        "source",
        "created_at",
        "updated_at",
        "confirmed_at",
        "confirmations",
        "listed_from",
        "listed_until",
        "superseded_by",
    )

    def status_at(self, instant: float) -> str:
        """The status the memory had at `instant`: a superseded one's before it was superseded, an
        approved or user-confirmed one `unconfirmed` until then (`source.unconfirmed_until`)."""
        status = self.status
        if status == "superseded" and (self.listed_until is None or instant < self.listed_until):
            status = str(self.source.get("was", "active"))
        until = self.source.get("unconfirmed_until")
        if status == "active" and isinstance(until, (int, float)) and instant < until:
            return "unconfirmed"
        return status

    def confirmations_at(self, instant: float) -> int:
        return sum(1 for t in self.confirmed_times if t <= instant)

    def confirmed(self, now: float) -> Memory:
        """Saved again: one more confirmation."""
        times = self.confirmed_times
        if len(times) < KEPT_CONFIRMATIONS:
            times = (*times, now)
        return replace(
            self, confirmations=self.confirmations + 1, confirmed_times=times, confirmed_at=now, updated_at=now
        )

    def listed_at(self, instant: float) -> bool:
        """Whether the memory was injectable at `instant` (a forgotten one never is again)."""
        if self.status == "forgotten" or self.listed_from is None or self.listed_from > instant:
            return False
        return self.listed_until is None or instant < self.listed_until


@dataclass(frozen=True)
class MemoryQuery:
    """The admin API's filters: tenant, scope, status, a case-insensitive substring of the text,
    the conversation a memory came from."""

    tenant: str | None = None
    scope: str | None = None
    status: str | None = None
    text: str | None = None
    conversation_id: str | None = None

    def matches(self, memory: Memory) -> bool:
        return (
            (self.tenant is None or memory.tenant == self.tenant)
            and (self.scope is None or memory.scope == self.scope)
            and (self.status is None or memory.status == self.status)
            and (self.text is None or self.text.lower() in memory.text.lower())
            and (self.conversation_id is None or memory.source.get("conversation_id") == self.conversation_id)
        )


def superseded_by(old: Memory, new: Memory) -> Memory:
    """`old` as it reads once `new` superseded it (its source keeps the status it had: an
    injection block of an earlier instant still shows it as it was then)."""
    return replace(
        old,
        status="superseded",
        superseded_by=new.id,
        listed_until=new.created_at,
        updated_at=new.created_at,
        source={**old.source, "was": old.status},
    )


def newest_first(memories: Sequence[Memory]) -> list[Memory]:
    """The admin listing order: most recently updated first, ties by id (descending)."""
    return sorted(memories, key=lambda m: (m.updated_at, m.id), reverse=True)


class MemoryStore(Protocol):
    """The memory half of the `Store` contract (tests/store/test_memories.py)."""

    async def save_memory(self, memory: Memory, supersedes: Memory | None = None) -> bool:
        """Insert `memory` (a new id). With `supersedes` (a record as read, of the same tenant and
        scope, current), mark it superseded by `memory` in the same write. False, writing
        nothing, when that record changed since it was read (another writer got there first)."""

    async def replace_memory(self, memory: Memory, expected_updated_at: float) -> bool:
        """Write `memory` over the stored record of its id (same tenant and scope) when that
        record's `updated_at` is still `expected_updated_at`; False, writing nothing, otherwise."""

    async def get_memory(self, memory_id: str) -> Memory | None: ...

    async def delete_memory(self, memory_id: str) -> bool:
        """Remove the record and every index entry of it; True when there was one."""

    async def scope_memories(self, tenant: str, scopes: Sequence[str]) -> list[Memory]:
        """Every memory (any status) of `tenant` in `scopes`, newest first."""

    async def list_memories(self, query: MemoryQuery, limit: int, offset: int) -> list[Memory]:
        """The memories matching `query`, `newest_first`, from `offset`, at most `limit`."""

    async def delete_memories_from(self, tenant: str, conversation_id: str) -> int:
        """Delete `tenant`'s memories whose source is `conversation_id`; how many."""

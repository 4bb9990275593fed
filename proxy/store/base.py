"""The `Store` protocol: everything the proxy persists, behind one async interface.

Conversations own branches; a branch owns the events appended to it after its fork point and
inherits its parent's events up to that point (`fork_seq`). Events are append-only. Every backend
passes the same contract suite (tests/store/).

A failing backend raises `proxy.errors.StoreError` from any method (each backend translates its
library's errors at one boundary), and a write to a deleted conversation `ConversationGone`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from ..errors import StoreError
from ..types import Message
from ..usage import TOKEN_FIELDS
from .access import AccessStore
from .memories import MemoryStore
from .public import PublicRecord


@dataclass(frozen=True)
class NewEvent:
    role: str
    message: Message
    chain_hash: str
    source: str  # "request" | "response"
    tokens: int | None = None
    call_id: str | None = None


@dataclass(frozen=True)
class Position:
    """The last event of a lineage: `seq` on `branch_id` (seq 0 = before the first event)."""

    conversation_id: str
    branch_id: str
    seq: int


@dataclass(frozen=True)
class ResponseTurn:
    """What an accepted request adds to its history once answered (`Store.record_answered`):
    the stamp of its events at `end` with the system prefix it was called with (None: the branch
    keeps the prefix it has), and the answer appended after them when there is a whole one."""

    end: Position
    system_hash: str | None
    answer: NewEvent | None


@dataclass(frozen=True)
class HashMatch:
    position: Position
    count: int
    """How many leading hashes of the queried chain are stored (the chain index + 1)."""
    system_hash: str | None
    """The system prefix the branch was last called with (for the one-message retry rule)."""


@dataclass(frozen=True)
class Conversation(PublicRecord):
    id: str
    tenant: str
    external_id: str | None
    created_at: float
    updated_at: float
    main_branch_id: str

    public = ("id", "tenant", "external_id", "created_at", "updated_at")


@dataclass(frozen=True)
class Branch(PublicRecord):
    id: str
    conversation_id: str
    parent_id: str | None
    fork_seq: int
    head_seq: int
    created_at: float
    updated_at: float

    public = ("id", "parent_id", "fork_seq", "head_seq", "created_at", "updated_at")


@dataclass(frozen=True)
class StoredEvent(PublicRecord):
    branch_id: str
    seq: int
    role: str
    message: Message
    chain_hash: str
    source: str
    tokens: int | None
    created_at: float
    call_id: str | None = None
    """The call whose answer the event is (a response), or, for the first event of a history an
    agent rebuilt after its own compaction, that compaction call (`proxy.rebuilt`); else None."""

    public = ("seq", "branch_id", "role", "message", "source", "tokens", "created_at")


@dataclass
class CallRecord(PublicRecord):
    """One upstream call, written once when it ends (complete, partial or error)."""

    id: str
    tenant: str
    route: str
    model: str | None
    purpose: str
    stream: bool
    started_at: float
    conversation_id: str | None = None
    branch_id: str | None = None
    status: str = "error"
    upstream_status: int | None = None
    error: str | None = None
    latency_ms: float | None = None
    ttfb_ms: float | None = None
    response: Message | None = None
    finish_reason: str | None = None
    usage_raw: Any = None
    usage: dict[str, int | None] = field(default_factory=dict)
    request_id: str | None = None
    system_hash: str | None = None
    tools_hash: str | None = None
    projection: dict[str, Any] | None = None
    cost_usd: float | None = None
    """At litellm's prices for the normalized usage (`proxy/ledger.py`); None when unknown."""
    wire: str | None = None
    """The client API that served the call (`Wire.name`); None in records written before it was kept."""
    saved_usd: float | None = None
    """What the rewriting kept off a main call's bill (`proxy.ledger.saved_cost`); None when unknown."""
    client: str | None = None
    """The client key that made the request: a configured client's name or an API key's id
    (`proxy/auth.py`); None for a caller's own key."""

    @property
    def day(self) -> str:
        """The UTC date the call started (`2026-12-04`): the ledger's `group_by=day`."""
        return datetime.fromtimestamp(self.started_at, UTC).date().isoformat()

    public = (
        "id",
        "conversation_id",
        "branch_id",
        "route",
        "model",
        "purpose",
        "stream",
        "status",
        "upstream_status",
        "error",
        "started_at",
        "latency_ms",
        "ttfb_ms",
        "response",
        "finish_reason",
        "usage_raw",
        "usage",
        "request_id",
        "projection",
        "cost_usd",
        "wire",
        "saved_usd",
        "client",
    )


def tokens_saved(purpose: str, projection: Mapping[str, Any] | None) -> int | None:
    """Tokens the rewriting kept out of a main call: the client's payload minus what was sent."""
    if purpose != "main" or not projection:
        return None
    client, sent = projection.get("client_tokens"), projection.get("sent_tokens")
    if not isinstance(client, int) or not isinstance(sent, int):
        return None
    return client - sent


USAGE_GROUP_COLUMNS = {
    "route": "route",
    "conversation": "conversation_id",
    "model": "model",
    "tenant": "tenant",
    "client": "client",
    "day": "day",
}
"""`/admin/usage?group_by=` values and the call field each groups by (`day`: the UTC date the
call started, `CallRecord.day`)."""

LEDGER_FIELDS: tuple[str, ...] = (*TOKEN_FIELDS, "cost_usd", "tokens_saved", "saved_usd")
"""What a `UsageCell` sums for its calls: the normalized token fields, the cost, and the tokens
and money the rewriting saved."""


@dataclass(frozen=True)
class UsageQuery:
    conversation_id: str | None = None
    route: str | None = None
    tenant: str | None = None
    since: float | None = None
    until: float | None = None
    group_by: str | None = None
    client: str | None = None
    """One client key's calls (`CallRecord.client`)."""
    """One of USAGE_GROUP_COLUMNS' keys, or None for totals only."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation": self.conversation_id,
            "route": self.route,
            "tenant": self.tenant,
            "client": self.client,
            "since": self.since,
            "until": self.until,
        }

    def matches(self, call: CallRecord) -> bool:
        return (
            (self.conversation_id is None or call.conversation_id == self.conversation_id)
            and (self.route is None or call.route == self.route)
            and (self.tenant is None or call.tenant == self.tenant)
            and (self.client is None or call.client == self.client)
            and (self.since is None or call.started_at >= self.since)
            and (self.until is None or call.started_at < self.until)
        )


@dataclass
class UsageCell:
    """The calls of one (group key, purpose, status): how many, the sum of each field's known
    values (None when none is known) and how many records knew it."""

    key: str | None
    purpose: str
    status: str
    calls: int
    sums: dict[str, float | int | None] = field(default_factory=dict)
    known: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredCheckpoint(PublicRecord):
    id: str
    conversation_id: str
    branch_id: str
    generation: int
    from_seq: int
    covered_through_seq: int
    source_hash: str
    """The chain hash of the last covered event: it pins the whole covered range."""
    summary: str
    tokens: int
    model: str | None
    format_version: int
    status: str  # active | superseded | failed
    created_at: float
    error: str | None = None

    public = (
        "id",
        "branch_id",
        "generation",
        "from_seq",
        "covered_through_seq",
        "summary",
        "tokens",
        "model",
        "format_version",
        "status",
        "created_at",
        "error",
    )


@dataclass(frozen=True)
class CheckpointCandidate:
    conversation_id: str
    branch_id: str
    parent_generation: int
    """The generation active on the branch when the job started (0: none)."""
    from_seq: int
    covered_through_seq: int
    source_hash: str
    summary: str
    tokens: int
    model: str | None
    format_version: int
    lease_token: int | None = None
    """The compaction lease's fencing token the job held: the commit is refused unless it is still
    the branch's current token (a replica whose lease was taken over cannot write back)."""

    def stored(self, id: str, status: str, created_at: float, error: str | None = None) -> StoredCheckpoint:
        """The checkpoint this candidate becomes (generation = parent + 1) with that status."""
        return StoredCheckpoint(
            id=id,
            conversation_id=self.conversation_id,
            branch_id=self.branch_id,
            generation=self.parent_generation + 1,
            from_seq=self.from_seq,
            covered_through_seq=self.covered_through_seq,
            source_hash=self.source_hash,
            summary=self.summary,
            tokens=self.tokens,
            model=self.model,
            format_version=self.format_version,
            status=status,
            created_at=created_at,
            error=error,
        )


class Store(MemoryStore, AccessStore, Protocol):
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> bool: ...
    async def tenant_salt(self) -> bytes: ...

    async def find_longest(self, hashes: list[str], tenant: str, conversation_id: str | None) -> HashMatch | None:
        """The stored event with the largest index in `hashes` (most recently active conversation
        first on ties), restricted to one conversation when `conversation_id` is given."""

    async def find_conversation(self, tenant: str, ref: str) -> Conversation | None:
        """By internal id or by the client's external id, within one tenant."""

    async def create_conversation(self, tenant: str, external_id: str | None) -> Conversation: ...

    async def conversations_with_external_id(self, external_id: str) -> list[Conversation]:
        """Every tenant's conversation with this client-chosen id (the admin API's lookup by the
        `X-Conversation-Id` a client sent), oldest first."""

    async def append(
        self, start: Position, events: list[NewEvent], system_hash: str | None, stamp: bool = True
    ) -> Position:
        """Append after `start`: events whose chain hash is already stored just move the position;
        a new event after a non-head position forks a child branch there. Idempotent. With
        `stamp`, the branch's `system_hash` (when given) and `updated_at` and the conversation's
        `updated_at` are set; without it (a request not answered yet) they stay as they were."""

    async def extend(self, head: Position, head_hash: str, events: list[NewEvent]) -> Position | None:
        """An unstamped `append` of `events` (new ones) after `head`, for a request whose history
        the history cache proved to continue a remembered branch head, so no `find_longest` ran.
        Done only when it lands exactly where the lookup would have put it: `head` is still its
        branch's head, its event is the only stored one with `head_hash`, and the first event's
        hash is stored nowhere (another writer appended, forked, retracted or deleted since: not
        done). None, changing nothing, when not done: the caller looks the history up instead."""

    async def retract(self, end: Position, hashes: list[str]) -> bool:
        """Undo an unstamped append that ended at `end` and stored the events `hashes` (oldest
        first), because their request was rejected: when they are still the newest events of
        `end.branch_id` (nothing appended after them, no branch forked inside them), delete them
        and move the head back; a non-main branch left without events of its own (the fork that
        append created) is deleted. True when undone; False, changing nothing, otherwise."""

    async def put_blob(self, digest: str, data: str) -> None:
        """Content-addressed storage for system prefixes and tool definitions."""

    async def get_blob(self, digest: str) -> str | None: ...

    async def record_call(self, call: CallRecord) -> None: ...

    async def record_answered(self, call: CallRecord, turn: ResponseTurn) -> Position | StoreError | None:
        """`record_call(call)` and `append(turn.end, [turn.answer], turn.system_hash)` in one
        write (`call` belongs to the turn's conversation). Returns where the answer is stored (the
        head the next request `extend`s; not `turn.end`'s branch when the append forked because
        another request moved that head), None when the turn has no answer. Raises, storing
        nothing, when the record is refused (a deleted conversation refuses the turn too). A
        refused turn is returned, not raised: the record is stored all the same."""

    async def last_call(self, branch_id: str, purpose: str) -> CallRecord | None: ...

    async def active_checkpoint(self, branch_id: str) -> StoredCheckpoint | None:
        """The branch's active checkpoint, or, for a branch that has none of its own, the newest
        ancestor checkpoint that covers nothing past the fork point."""

    async def commit_checkpoint(self, candidate: CheckpointCandidate) -> StoredCheckpoint | None:
        """Compare-and-set: commits only if `parent_generation` is still the branch's active
        generation and the event at `covered_through_seq` still has `source_hash`. None when the
        candidate is stale (it is discarded) -- or raises ConversationGone."""

    async def record_failed_checkpoint(self, candidate: CheckpointCandidate, error: str) -> None: ...

    async def acquire_lease(self, branch_id: str, owner: str, ttl: float) -> int | None:
        """The branch's compaction lease for `ttl` seconds: a fencing token strictly greater than
        every earlier one of the branch, or None while another owner holds a live lease (or the
        branch does not exist)."""

    async def renew_lease(self, branch_id: str, owner: str, token: int, ttl: float) -> bool:
        """Extend a live lease held by `owner` with `token`; False when it expired or was taken over."""

    async def release_lease(self, branch_id: str, owner: str, token: int) -> None:
        """Give the lease up; does nothing unless `owner` still holds it with `token`."""

    async def list_checkpoints(self, conversation_id: str) -> list[StoredCheckpoint]: ...

    async def list_conversations(self, limit: int, before: float | None) -> list[Conversation]: ...
    async def get_conversation(self, conversation_id: str) -> Conversation | None: ...
    async def list_branches(self, conversation_id: str) -> list[Branch]: ...
    async def lineage_events(self, branch_id: str, after_seq: int, limit: int) -> list[StoredEvent]: ...
    async def lineage_counts(self, branch_id: str) -> dict[str, int]:
        """The token counts stored with the events of the branch's lineage (`NewEvent.tokens`),
        by chain hash; events stored without one are not in it."""
        ...

    async def list_calls(self, conversation_id: str, limit: int, offset: int) -> list[CallRecord]: ...
    async def calls_of_purpose(self, purpose: str, since: float, limit: int) -> list[CallRecord]:
        """Up to `limit` of every tenant's calls of `purpose` started at or after `since`, newest
        first (the shadow report, `proxy/shadow/`: admin reads, not the request path)."""

    async def usage_cells(self, query: UsageQuery) -> list[UsageCell]:
        """The ledger over the calls matching `query`, one cell per (group key, purpose, status);
        `proxy.ledger.cells_from_calls` is the reference the backend must agree with."""

    async def delete_conversation(self, conversation_id: str, only_if_empty: bool = False) -> bool:
        """Delete it and everything it owns, fenced against late writes. With `only_if_empty`, in
        the same atomic step, only while it has one branch, no events and no call records (a
        failed first request's conversation, which a concurrent request may just have continued)."""

    # -- retention ---------------------------------------------------------------------------
    async def purge_calls(self, before: float) -> int:
        """Delete the call records started before `before` (epoch seconds); how many."""

    async def purge_checkpoints(self, before: float) -> int:
        """Delete superseded and failed checkpoints created before `before`; active ones stay."""

    async def stale_conversations(self, before: float, limit: int) -> list[str]:
        """Ids of up to `limit` conversations last active before `before`, oldest first."""

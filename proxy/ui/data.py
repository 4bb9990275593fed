"""What the inspector's pages show, read through the `Store` protocol (no SQL of its own).

Totals come from the same ledger the admin API serves (`store.usage_cells` + `ledger.summarize`),
so a conversation's numbers on a page equal `/admin/usage?conversation=ID` by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.search import Hit, parse_query, search

from .. import side_calls
from ..errors import BadRequest, Conflict, NotFound
from ..ledger import summarize
from ..store.base import Branch, CallRecord, Conversation, Store, StoredCheckpoint, StoredEvent, UsageQuery

ID_SCAN = 5000
"""How many of the most recent conversations an id search looks through."""
TEXT_SCAN = 200
"""How many of the most recent conversations a text search over all conversations looks through."""
CALLS_MAX = 100_000
ALL = 1 << 30


@dataclass(frozen=True)
class ConversationRow:
    conversation: Conversation
    branches: int
    totals: dict[str, Any]

    @property
    def shown_id(self) -> str:
        """The client's own id when it sent one (X-Conversation-Id), else the proxy's."""
        return self.conversation.external_id or self.conversation.id

    @property
    def turns(self) -> int:
        return int(self.totals["calls_by_purpose"].get("main", 0))

    def to_dict(self) -> dict[str, Any]:
        t = self.totals
        return {
            **self.conversation.to_dict(),
            "shown_id": self.shown_id,
            "tenant": self.conversation.tenant,
            "branches": self.branches,
            "turns": self.turns,
            "input_tokens": t["input_total"],
            "output_tokens": t["output"],
            "cache_read_tokens": t["cache_read"],
            "cached_share": cached_share(t),
            "tokens_saved": t["tokens_saved"],
            "cost_usd": t["cost_usd"],
            "calls": t["calls"],
        }


def cached_share(totals: dict[str, Any]) -> float | None:
    """Cache reads over all input tokens; None while either is unknown."""
    read, total = totals.get("cache_read"), totals.get("input_total")
    if read is None or not total:
        return None
    return float(read) / float(total)


async def totals(store: Store, conversation_id: str | None = None) -> dict[str, Any]:
    query = UsageQuery(conversation_id=conversation_id)
    result: dict[str, Any] = summarize(await store.usage_cells(query), query)["totals"]
    return result


async def row(store: Store, conversation: Conversation) -> ConversationRow:
    branches = await store.list_branches(conversation.id)
    return ConversationRow(conversation, len(branches), await totals(store, conversation.id))


async def conversation_rows(
    store: Store, limit: int, before: float | None
) -> tuple[list[ConversationRow], float | None]:
    """A page of conversations, most recently active first, and the `before` of the next page."""
    found = await store.list_conversations(limit, before)
    rows = [await row(store, c) for c in found]
    return rows, (found[-1].updated_at if len(found) == limit else None)


async def find_by_id(store: Store, text: str, limit: int) -> list[ConversationRow]:
    """Conversations whose id or client id contains `text` (case-insensitive), newest first."""
    needle = text.strip().lower()
    exact = await store.get_conversation(text.strip())
    matches: list[Conversation] = [exact] if exact else []
    for conversation in await store.list_conversations(ID_SCAN, None):
        if len(matches) >= limit:
            break
        ids = (conversation.id.lower(), (conversation.external_id or "").lower())
        if conversation not in matches and any(needle in value for value in ids):
            matches.append(conversation)
    return [await row(store, c) for c in matches]


@dataclass(frozen=True)
class TextMatch:
    row: ConversationRow
    hits: list[Hit]


async def find_by_text(store: Store, text: str, limit: int) -> list[TextMatch]:
    """Conversations whose newest branch's history matches the history search `text`
    (`policies.search`: words and "quoted phrases", all must match), with their first hits."""
    try:
        query = parse_query(text)
    except ValueError as exc:
        raise BadRequest(str(exc), param="q") from None
    out: list[TextMatch] = []
    for conversation in await store.list_conversations(TEXT_SCAN, None):
        if len(out) >= limit:
            break
        branch = newest_branch(await store.list_branches(conversation.id))
        hits = search(await store.lineage_events(branch.id, 0, ALL), query, excerpt_chars=160)
        if hits:
            out.append(TextMatch(await row(store, conversation), hits[:3]))
    return out


def newest_branch(branches: Sequence[Branch]) -> Branch:
    """The branch the admin API defaults to: the most recently active one."""
    return max(branches, key=lambda b: (b.updated_at, b.created_at))


@dataclass
class Detail:
    """One conversation: its record, branches, calls (oldest first), checkpoints, totals, and the
    branches that continue the line after the agent's own compaction (`continued`: branch id ->
    that `client_compaction` call's id, `proxy.rebuilt`)."""

    conversation: Conversation
    branches: list[Branch]
    calls: list[CallRecord]
    checkpoints: list[StoredCheckpoint]
    totals: dict[str, Any]
    continued: dict[str, str] = field(default_factory=dict)

    def branch(self, branch_id: str | None) -> Branch:
        if branch_id is None:
            return newest_branch(self.branches)
        for branch in self.branches:
            if branch.id == branch_id:
                return branch
        raise NotFound(f"Conversation {self.conversation.id!r} has no branch {branch_id!r}.", param="branch")

    def call(self, call_id: str) -> CallRecord:
        for call in self.calls:
            if call.id == call_id:
                return call
        raise NotFound(f"Conversation {self.conversation.id!r} has no call {call_id!r}.", param="call")

    def lineage(self, branch: Branch) -> list[Branch]:
        """`branch` and its ancestors, root last."""
        by_id = {b.id: b for b in self.branches}
        chain = [branch]
        while chain[-1].parent_id in by_id:
            chain.append(by_id[chain[-1].parent_id])
        return chain


async def resolve(store: Store, ref: str) -> Conversation:
    """The conversation `ref` names: its internal id, or the client's own `X-Conversation-Id`
    (the id the client sees echoed) when one tenant has a conversation of that id."""
    conversation = await store.get_conversation(ref)
    if conversation is not None:
        return conversation
    found = await store.conversations_with_external_id(ref)
    if len(found) == 1:
        return found[0]
    if found:
        raise Conflict(
            f"{len(found)} tenants have a conversation {ref!r}: open it by its internal id "
            f"({', '.join(c.id for c in found)}).",
            param="id",
        )
    raise NotFound(f"No conversation {ref!r}.", param="id")


async def detail(store: Store, ref: str) -> Detail:
    conversation = await resolve(store, ref)
    calls = await store.list_calls(conversation.id, CALLS_MAX, 0)
    calls.sort(key=lambda c: c.started_at)
    branches = await store.list_branches(conversation.id)
    return Detail(
        conversation,
        branches,
        calls,
        await store.list_checkpoints(conversation.id),
        await totals(store, conversation.id),
        await _continued(store, branches, calls),
    )


async def _continued(store: Store, branches: list[Branch], calls: list[CallRecord]) -> dict[str, str]:
    """The branches forked from their parent's start whose first event names one of the
    conversation's compaction calls (`Detail.continued`)."""
    compactions = {c.id for c in calls if c.purpose == side_calls.PURPOSE}
    out: dict[str, str] = {}
    for branch in branches:
        if compactions and branch.parent_id is not None and branch.fork_seq == 0:
            first = await store.lineage_events(branch.id, 0, 1)
            if first and first[0].call_id in compactions:
                out[branch.id] = str(first[0].call_id)
    return out


async def events(store: Store, branch: Branch, after: int, limit: int) -> list[StoredEvent]:
    return await store.lineage_events(branch.id, after, limit)


def export(
    detail: Detail, events_by_branch: dict[str, list[StoredEvent]], prefix: list[Any], tools: Any
) -> dict[str, Any]:
    """The download: `messages`/`tools` of the newest branch (what `ctxproxy replay` reads), then
    everything stored: branches with their events, calls, checkpoints."""
    newest = newest_branch(detail.branches)
    out: dict[str, Any] = {
        "name": detail.conversation.external_id or detail.conversation.id,
        "messages": [*prefix, *(e.message for e in events_by_branch[newest.id])],
        "conversation": detail.conversation.to_dict(),
        "branches": [{**b.to_dict(), "events": [e.to_dict() for e in events_by_branch[b.id]]} for b in detail.branches],
        "calls": [c.to_dict() for c in detail.calls],
        "checkpoints": [c.to_dict() for c in detail.checkpoints],
        "totals": detail.totals,
    }
    if tools:
        out["tools"] = tools
    return out

"""The Store contract: every backend must pass this one suite.

Add a backend by adding an entry to BACKENDS (conftest.py, whose `stores` and `store` fixtures
run every test of this suite and of test_memories.py on each backend): a function that, given the test's tmp_path and a
location name, returns an unopened store. The same name must reach the same data (so close+reopen
can be tested); a different name must be an independent, empty store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

from proxy import identify
from proxy.errors import ConversationGone, StoreError
from proxy.ledger import cells_from_calls
from proxy.store.base import (
    Branch,
    CallRecord,
    CheckpointCandidate,
    HashMatch,
    NewEvent,
    Position,
    ResponseTurn,
    Store,
    UsageQuery,
)
from proxy.types import Message
from tests.store.conftest import Stores

# -- helpers --------------------------------------------------------------------------------------

T1, T2 = "t_tenant_one", "t_tenant_two"


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


def new_events(tenant: str, history: list[Message], start: int = 0, tokens: int | None = None) -> list[NewEvent]:
    hashes = identify.chain(tenant, history)
    return [
        NewEvent(role=m["role"], message=m, chain_hash=h, source="request", tokens=tokens)
        for m, h in list(zip(history, hashes, strict=True))[start:]
    ]


def origin(conversation: Any) -> Position:
    return Position(conversation.id, conversation.main_branch_id, 0)


async def lineage(store: Store, branch_id: str, after: int = 0, limit: int = 10_000) -> list[tuple[str, int, str]]:
    return [(e.branch_id, e.seq, e.message["content"]) for e in await store.lineage_events(branch_id, after, limit)]


async def tick() -> None:
    # Orders updated_at stamps on coarse clocks; microseconds are enough on Linux.
    await asyncio.sleep(0.002)


U1, A1, U2, A2, U3, A3, U4, U5 = (
    user("u1"),
    assistant("a1"),
    user("u2"),
    assistant("a2"),
    user("u3"),
    assistant("a3"),
    user("u4"),
    user("u5"),
)


# -- lifecycle ------------------------------------------------------------------------------------


async def test_ping(store: Store) -> None:
    assert await store.ping() is True


async def test_conversation_gone_is_a_store_error() -> None:
    assert issubclass(ConversationGone, StoreError)


async def test_tenant_salt_stable_across_reopen(stores: Stores, store: Store) -> None:
    salt = await store.tenant_salt()
    assert isinstance(salt, bytes)
    assert len(salt) >= 16
    assert await store.tenant_salt() == salt
    reopened = await stores.reopen(store)
    assert await reopened.tenant_salt() == salt
    other = await stores.open("other")
    assert await other.tenant_salt() != salt


# -- conversations --------------------------------------------------------------------------------


async def test_create_and_find_by_id(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    assert conv.tenant == T1
    assert conv.external_id is None
    assert conv.id != conv.main_branch_id
    assert conv.created_at == conv.updated_at
    assert await store.find_conversation(T1, conv.id) == conv
    assert await store.get_conversation(conv.id) == conv
    assert await store.find_conversation(T2, conv.id) is None
    assert await store.find_conversation(T1, "c_does_not_exist") is None
    (main,) = await store.list_branches(conv.id)
    assert (main.id, main.conversation_id, main.parent_id, main.fork_seq, main.head_seq) == (
        conv.main_branch_id,
        conv.id,
        None,
        0,
        0,
    )


async def test_find_by_external_id_scoped_per_tenant(store: Store) -> None:
    one = await store.create_conversation(T1, "session-42")
    two = await store.create_conversation(T2, "session-42")
    assert one.id != two.id
    assert (await store.find_conversation(T1, "session-42")) == one
    assert (await store.find_conversation(T2, "session-42")) == two
    assert await store.find_conversation(T2, one.id) is None
    assert await store.find_conversation(T1, two.id) is None
    assert await store.find_conversation("t_other", "session-42") is None


async def test_conversations_with_external_id_across_tenants(store: Store) -> None:
    one = await store.create_conversation(T1, "shared:id/1")
    await tick()
    two = await store.create_conversation(T2, "shared:id/1")
    await store.create_conversation(T1, "shared:id/10")
    await store.create_conversation(T1, "x:shared:id/1")
    assert await store.conversations_with_external_id("shared:id/1") == [one, two]
    assert await store.conversations_with_external_id("shared:id/*") == []
    assert await store.conversations_with_external_id(one.id) == []
    await store.delete_conversation(one.id)
    assert await store.conversations_with_external_id("shared:id/1") == [two]


async def _snapshot(store: Store, conv_id: str) -> Any:
    branches = await store.list_branches(conv_id)
    return (
        await store.get_conversation(conv_id),
        branches,
        {b.id: await store.lineage_events(b.id, 0, 1000) for b in branches},
    )


async def test_an_unstamped_append_retracted_leaves_no_trace(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    head = await store.append(origin(conv), new_events(T1, [U1, A1]), "sys-1")
    before = await _snapshot(store, conv.id)
    await tick()
    rejected = new_events(T1, [U1, A1, U2], start=2)
    end = await store.append(head, rejected, None, stamp=False)
    assert end == Position(conv.id, conv.main_branch_id, 3)
    assert (await store.get_conversation(conv.id)) == before[0]  # not stamped
    assert await store.retract(end, [e.chain_hash for e in rejected]) is True
    assert await _snapshot(store, conv.id) == before
    assert (await store.find_longest(identify.chain(T1, [U1, A1, U2]), T1, None)).count == 2  # type: ignore[union-attr]
    # the same request again is appended afresh, at the same place
    assert await store.append(head, rejected, None, stamp=False) == end


async def test_a_retracted_fork_is_removed(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    await store.append(origin(conv), new_events(T1, [U1, A1, U2, A2]), None)
    before = await _snapshot(store, conv.id)
    rejected = new_events(T1, [U1, A1, U3], start=2)
    end = await store.append(Position(conv.id, conv.main_branch_id, 2), rejected, None, stamp=False)
    assert end.branch_id != conv.main_branch_id
    assert await store.retract(end, [e.chain_hash for e in rejected]) is True
    assert await _snapshot(store, conv.id) == before
    assert (await store.find_longest(identify.chain(T1, [U1, A1, U3]), T1, None)).count == 2  # type: ignore[union-attr]


async def test_retract_changes_nothing_once_the_history_moved_on(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    rejected = new_events(T1, [U1, A1])
    end = await store.append(origin(conv), rejected, None, stamp=False)
    hashes = [e.chain_hash for e in rejected]
    later = await store.append(end, new_events(T1, [U1, A1, U2], start=2), None)
    assert await store.retract(end, hashes) is False
    fork = await store.append(Position(conv.id, conv.main_branch_id, 1), new_events(T1, [U1, A2], start=1), None)
    assert await store.retract(later, hashes[1:]) is False  # not the newest events
    assert await store.retract(fork, [identify.chain(T1, [U1, A3])[1]]) is False  # not these events
    assert len(await store.lineage_events(later.branch_id, 0, 100)) == 3
    assert len(await store.list_branches(conv.id)) == 2


# -- extend: an append at a remembered head, without a lookup -----------------------------------


def chain_hash(tenant: str, history: list[Message]) -> str:
    return identify.chain(tenant, history)[-1]


async def test_extend_at_the_head_appends_where_lookup_and_append_would(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    head = await store.append(origin(conv), new_events(T1, [U1, A1]), "sys-1")
    before = await store.get_conversation(conv.id)
    await tick()
    added = new_events(T1, [U1, A1, U2, A2], start=2)
    end = await store.extend(head, chain_hash(T1, [U1, A1]), added)
    assert end == Position(conv.id, conv.main_branch_id, 4)
    assert await lineage(store, conv.main_branch_id) == [
        (conv.main_branch_id, 1, "u1"),
        (conv.main_branch_id, 2, "a1"),
        (conv.main_branch_id, 3, "u2"),
        (conv.main_branch_id, 4, "a2"),
    ]
    assert len(await store.list_branches(conv.id)) == 1
    assert await store.get_conversation(conv.id) == before  # unstamped, like the request append it replaces
    match = await store.find_longest(identify.chain(T1, [U1, A1, U2, A2, U3]), T1, None)
    assert match == HashMatch(end, 4, "sys-1")  # the tenant-wide identity knows the new events
    assert await store.retract(end, [e.chain_hash for e in added]) is True  # a rejected request, undone


async def test_extend_refuses_a_head_another_writer_moved(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    head = await store.append(origin(conv), new_events(T1, [U1, A1]), None)
    await store.append(head, new_events(T1, [U1, A1, U2], start=2), None)  # another replica's turn
    before = await _snapshot(store, conv.id)
    # continuing the remembered head now needs a fork, and re-sending the other's turn a lookup
    assert await store.extend(head, chain_hash(T1, [U1, A1]), new_events(T1, [U1, A1, U3], start=2)) is None
    assert await store.extend(head, chain_hash(T1, [U1, A1]), new_events(T1, [U1, A1, U2, A2], start=2)) is None
    assert await _snapshot(store, conv.id) == before
    # a stale position on the right branch, or a hash that is not the head's, is refused too
    moved = Position(conv.id, conv.main_branch_id, 3)
    assert await store.extend(moved, chain_hash(T1, [U1, A1]), new_events(T1, [U1, A1, U2, A2], start=3)) is None
    assert await store.extend(moved, chain_hash(T2, [U1, A1, U2]), new_events(T1, [U1, A1, U2, A2], start=3)) is None
    assert await _snapshot(store, conv.id) == before
    assert await store.extend(moved, chain_hash(T1, [U1, A1, U2]), new_events(T1, [U1, A1, U2, A2], start=3)) == (
        Position(conv.id, conv.main_branch_id, 4)
    )


async def test_extend_refuses_a_head_retracted_and_replaced(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    head = await store.append(origin(conv), new_events(T1, [U1, A1, U2]), None)
    assert await store.retract(head, [chain_hash(T1, [U1, A1, U2])]) is True
    await store.append(Position(conv.id, conv.main_branch_id, 2), new_events(T1, [U1, A1, U3], start=2), None)
    # the same branch and seq, another event there
    assert await store.extend(head, chain_hash(T1, [U1, A1, U2]), new_events(T1, [U1, A1, U2, A2], start=3)) is None
    assert await lineage(store, conv.main_branch_id) == [
        (conv.main_branch_id, 1, "u1"),
        (conv.main_branch_id, 2, "a1"),
        (conv.main_branch_id, 3, "u3"),
    ]


async def test_extend_refuses_a_head_whose_history_another_conversation_holds(store: Store) -> None:
    """The lookup would pick the most recently active of the two: only it can decide."""
    mine = await store.create_conversation(T1, "mine")
    theirs = await store.create_conversation(T1, "theirs")
    head = await store.append(origin(mine), new_events(T1, [U1, A1]), None)
    await store.append(origin(theirs), new_events(T1, [U1, A1]), None)
    assert await store.extend(head, chain_hash(T1, [U1, A1]), new_events(T1, [U1, A1, U2], start=2)) is None
    assert len(await store.lineage_events(mine.main_branch_id, 0, 100)) == 2


async def test_extend_refuses_a_deleted_conversation_and_writes_nothing(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    head = await store.append(origin(conv), new_events(T1, [U1, A1]), None)
    assert await store.delete_conversation(conv.id) is True
    assert await store.extend(head, chain_hash(T1, [U1, A1]), new_events(T1, [U1, A1, U2], start=2)) is None
    assert await store.get_conversation(conv.id) is None
    assert await store.lineage_events(conv.main_branch_id, 0, 100) == []
    assert await store.find_longest(identify.chain(T1, [U1, A1, U2]), T1, None) is None


async def test_create_same_external_id_twice_returns_the_first(store: Store) -> None:
    first = await store.create_conversation(T1, "dup")
    second = await store.create_conversation(T1, "dup")
    assert second.id == first.id
    assert second.main_branch_id == first.main_branch_id


async def test_conversation_ids_are_unique(store: Store) -> None:
    convs = [await store.create_conversation(T1, None) for _ in range(20)]
    assert len({c.id for c in convs}) == 20
    assert len({c.main_branch_id for c in convs}) == 20


# -- append ---------------------------------------------------------------------------------------


async def test_append_assigns_seq_one_to_n(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    history = [U1, A1, U2]
    pos = await store.append(origin(conv), new_events(T1, history, tokens=7), "sys-1")
    assert pos == Position(conv.id, conv.main_branch_id, 3)
    events = await store.lineage_events(conv.main_branch_id, 0, 100)
    assert [(e.branch_id, e.seq, e.role, e.message, e.source, e.tokens) for e in events] == [
        (conv.main_branch_id, 1, "user", U1, "request", 7),
        (conv.main_branch_id, 2, "assistant", A1, "request", 7),
        (conv.main_branch_id, 3, "user", U2, "request", 7),
    ]
    assert [e.chain_hash for e in events] == identify.chain(T1, history)
    (main,) = await store.list_branches(conv.id)
    assert main.head_seq == 3


async def test_append_continues_from_head(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    pos = await store.append(origin(conv), new_events(T1, [U1]), None)
    pos = await store.append(pos, new_events(T1, [U1, A1], start=1), None)
    pos = await store.append(pos, new_events(T1, [U1, A1, U2], start=2), None)
    assert pos == Position(conv.id, conv.main_branch_id, 3)
    assert await lineage(store, conv.main_branch_id) == [
        (conv.main_branch_id, 1, "u1"),
        (conv.main_branch_id, 2, "a1"),
        (conv.main_branch_id, 3, "u2"),
    ]
    assert len(await store.list_branches(conv.id)) == 1


async def test_append_is_idempotent(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    events = new_events(T1, [U1, A1, U2])
    first = await store.append(origin(conv), events, "sys")
    again = await store.append(origin(conv), events, "sys")
    assert again == first
    assert (await store.append(first, [], "sys")) == first
    partial = await store.append(origin(conv), events[:2], "sys")
    assert partial == Position(conv.id, conv.main_branch_id, 2)
    assert len(await store.lineage_events(conv.main_branch_id, 0, 100)) == 3
    assert len(await store.list_branches(conv.id)) == 1
    # Replaying the whole history plus one new message appends only that message, at the head.
    more = await store.append(origin(conv), new_events(T1, [U1, A1, U2, A2]), "sys")
    assert more == Position(conv.id, conv.main_branch_id, 4)
    assert len(await store.lineage_events(conv.main_branch_id, 0, 100)) == 4
    assert len(await store.list_branches(conv.id)) == 1


async def test_lineage_counts_are_the_stored_counts_of_the_lineage(store: Store) -> None:
    """By chain hash, the counts stored with the lineage's events: an ancestor's up to the
    fork point, none of an event stored without one, none of another branch."""
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    history = [U1, A1, U2]
    await store.append(origin(conv), new_events(T1, history, tokens=7), "sys-1")
    hashes = identify.chain(T1, history)
    assert await store.lineage_counts(main) == dict.fromkeys(hashes, 7)
    fork = await store.append(Position(conv.id, main, 2), new_events(T1, [U1, A1, U3], start=2), None)
    assert fork.branch_id != main
    grown = [U1, A1, U3, A3]
    await store.append(fork, new_events(T1, grown, start=3, tokens=5), None)
    counts = await store.lineage_counts(fork.branch_id)
    assert counts == {hashes[0]: 7, hashes[1]: 7, identify.chain(T1, grown)[3]: 5}
    assert await store.lineage_counts(main) == dict.fromkeys(hashes, 7)


async def test_append_after_non_head_forks_a_child_branch(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), None)
    # The client rewound to a1 and asked something else.
    pos = await store.append(origin(conv), new_events(T1, [U1, A1, U3]), None)
    assert pos.conversation_id == conv.id
    assert pos.branch_id != main
    assert pos.seq == 3
    branches = {b.id: b for b in await store.list_branches(conv.id)}
    assert set(branches) == {main, pos.branch_id}
    child = branches[pos.branch_id]
    assert (child.conversation_id, child.parent_id, child.fork_seq, child.head_seq) == (conv.id, main, 2, 3)
    assert branches[main].head_seq == 3
    assert await lineage(store, pos.branch_id) == [(main, 1, "u1"), (main, 2, "a1"), (pos.branch_id, 3, "u3")]
    assert await lineage(store, main) == [(main, 1, "u1"), (main, 2, "a1"), (main, 3, "u2")]
    # Idempotent on the child as well.
    assert await store.append(origin(conv), new_events(T1, [U1, A1, U3]), None) == pos
    assert len(await store.list_branches(conv.id)) == 2


async def test_child_grows_without_forking_again(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), None)
    child = await store.append(origin(conv), new_events(T1, [U1, A1, U3]), None)
    grown = await store.append(child, new_events(T1, [U1, A1, U3, A3], start=3), None)
    assert grown == Position(conv.id, child.branch_id, 4)
    assert len(await store.list_branches(conv.id)) == 2


async def test_fork_at_the_root(store: Store) -> None:
    conv = await store.create_conversation(T1, "explicit")
    main = conv.main_branch_id
    await store.append(origin(conv), new_events(T1, [U1, A1]), None)
    pos = await store.append(origin(conv), new_events(T1, [U4]), None)
    assert pos.branch_id != main
    assert pos.seq == 1
    child = next(b for b in await store.list_branches(conv.id) if b.id == pos.branch_id)
    assert (child.parent_id, child.fork_seq) == (main, 0)
    assert await lineage(store, pos.branch_id) == [(pos.branch_id, 1, "u4")]


async def test_a_fork_at_the_root_of_a_child_continues_the_child_and_keeps_its_call_link(store: Store) -> None:
    """An agent's rebuilt history after its compaction on a branch forked from the start: the next
    branch's parent is that branch, it inherits nothing, and its first event names the compaction
    call (`proxy.rebuilt`), read back as the event's `call_id`."""
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    await store.append(origin(conv), new_events(T1, [U1, A1]), None)
    first = await store.append(origin(conv), new_events(T1, [U2, A2]), None)
    linked = [
        dataclasses.replace(e, call_id="c_compaction") if i == 0 else e for i, e in enumerate(new_events(T1, [U3]))
    ]
    second = await store.append(Position(conv.id, first.branch_id, 0), linked, None)
    branches = {b.id: b for b in await store.list_branches(conv.id)}
    assert (branches[first.branch_id].parent_id, branches[first.branch_id].fork_seq) == (main, 0)
    assert (branches[second.branch_id].parent_id, branches[second.branch_id].fork_seq) == (first.branch_id, 0)
    events = await store.lineage_events(second.branch_id, 0, 10)
    assert [(e.branch_id, e.seq, e.call_id) for e in events] == [(second.branch_id, 1, "c_compaction")]
    assert [e.call_id for e in await store.lineage_events(first.branch_id, 0, 10)] == [None, None]


async def test_lineage_of_a_grandchild(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), None)
    child = await store.append(origin(conv), new_events(T1, [U1, A1, U3, A3, U4]), None)
    grand = await store.append(origin(conv), new_events(T1, [U1, A1, U3, A3, U5]), None)
    assert len({main, child.branch_id, grand.branch_id}) == 3
    branches = {b.id: b for b in await store.list_branches(conv.id)}
    assert (branches[grand.branch_id].parent_id, branches[grand.branch_id].fork_seq) == (child.branch_id, 4)
    c, g = child.branch_id, grand.branch_id
    assert await lineage(store, g) == [(main, 1, "u1"), (main, 2, "a1"), (c, 3, "u3"), (c, 4, "a3"), (g, 5, "u5")]
    assert await lineage(store, c) == [(main, 1, "u1"), (main, 2, "a1"), (c, 3, "u3"), (c, 4, "a3"), (c, 5, "u4")]
    # after_seq and limit page through the whole lineage.
    assert await lineage(store, g, after=2) == [(c, 3, "u3"), (c, 4, "a3"), (g, 5, "u5")]
    assert await lineage(store, g, after=1, limit=2) == [(main, 2, "a1"), (c, 3, "u3")]
    assert await lineage(store, g, after=5) == []
    assert await lineage(store, "b_unknown") == []


async def test_append_stores_message_and_metadata_verbatim(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "./ü"}'}}
        ],
    }
    event = NewEvent(
        role="assistant",
        message=message,
        chain_hash=identify.chain(T1, [message])[0],
        source="response",
        tokens=None,
        call_id="call-record-1",
    )
    await store.append(origin(conv), [event], None)
    (stored,) = await store.lineage_events(conv.main_branch_id, 0, 10)
    assert stored.message == message
    assert (stored.role, stored.source, stored.tokens, stored.chain_hash) == (
        "assistant",
        "response",
        None,
        event.chain_hash,
    )
    assert stored.created_at >= conv.created_at


async def test_append_stores_any_message_json_accepted(store: Store) -> None:
    # json.loads accepts lone surrogates ("\ud83d", sent by JS agents that cut a string mid-emoji); the
    # store must keep such a message like any other, not fail the request.
    import json

    message = json.loads('{"role": "tool", "tool_call_id": "c", "content": "cut here \\ud83d"}')
    conv = await store.create_conversation(T1, None)
    event = NewEvent(role="tool", message=message, chain_hash="h-surrogate", source="request")
    assert await store.append(origin(conv), [event], None) == Position(conv.id, conv.main_branch_id, 1)
    (stored,) = await store.lineage_events(conv.main_branch_id, 0, 10)
    assert stored.message == message


# -- find_longest ---------------------------------------------------------------------------------


async def test_find_longest_prefix(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), "sys-1")
    longer = identify.chain(T1, [U1, A1, U2, A2, U3])
    assert await store.find_longest(longer, T1, None) == HashMatch(
        Position(conv.id, conv.main_branch_id, 3), 3, "sys-1"
    )
    diverged = identify.chain(T1, [U1, A1, U4])
    match = await store.find_longest(diverged, T1, None)
    assert match is not None
    assert (match.position, match.count) == (Position(conv.id, conv.main_branch_id, 2), 2)
    assert await store.find_longest(identify.chain(T1, [U4]), T1, None) is None
    assert await store.find_longest([], T1, None) is None


async def test_find_longest_respects_tenant(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    hashes = identify.chain(T1, [U1, A1])
    await store.append(origin(conv), new_events(T1, [U1, A1]), None)
    assert await store.find_longest(hashes, T2, None) is None
    assert await store.find_longest(hashes, T2, conv.id) is None
    assert (await store.find_longest(hashes, T1, None)) is not None


async def test_find_longest_conversation_filter(store: Store) -> None:
    a = await store.create_conversation(T1, "a")
    b = await store.create_conversation(T1, "b")
    empty = await store.create_conversation(T1, "empty")
    await store.append(origin(a), new_events(T1, [U1, A1, U2]), None)
    await tick()
    await store.append(origin(b), new_events(T1, [U1]), None)
    query = identify.chain(T1, [U1, A1, U2])
    match_a = await store.find_longest(query, T1, a.id)
    match_b = await store.find_longest(query, T1, b.id)
    assert match_a is not None and match_b is not None
    assert (match_a.position, match_a.count) == (Position(a.id, a.main_branch_id, 3), 3)
    assert (match_b.position, match_b.count) == (Position(b.id, b.main_branch_id, 1), 1)
    assert await store.find_longest(query, T1, empty.id) is None
    # Without a filter, the longest wins even though b is more recent.
    unfiltered = await store.find_longest(query, T1, None)
    assert unfiltered is not None and unfiltered.position.conversation_id == a.id


async def test_find_longest_tie_goes_to_most_recently_updated(store: Store) -> None:
    older = await store.create_conversation(T1, None)
    newer = await store.create_conversation(T1, None)
    query = identify.chain(T1, [U1, A1, U2])
    await store.append(origin(older), new_events(T1, [U1, A1]), "sys-old")
    await tick()
    await store.append(origin(newer), new_events(T1, [U1, A1]), "sys-new")
    match = await store.find_longest(query, T1, None)
    assert match == HashMatch(Position(newer.id, newer.main_branch_id, 2), 2, "sys-new")
    await tick()
    await store.append(Position(older.id, older.main_branch_id, 2), [], "sys-old-2")  # touches `older`
    match = await store.find_longest(query, T1, None)
    assert match == HashMatch(Position(older.id, older.main_branch_id, 2), 2, "sys-old-2")


async def test_find_longest_on_a_fork(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), "s")
    child = await store.append(origin(conv), new_events(T1, [U1, A1, U3]), "s")
    match = await store.find_longest(identify.chain(T1, [U1, A1, U3, A3]), T1, None)
    assert match is not None and (match.position, match.count) == (child, 3)


async def test_find_longest_system_hash_tracks_last_call(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    pos = await store.append(origin(conv), new_events(T1, [U1]), "sys-1")
    query = identify.chain(T1, [U1, A1])
    assert (await store.find_longest(query, T1, None)).system_hash == "sys-1"  # type: ignore[union-attr]
    await store.append(pos, [], "sys-2")
    assert (await store.find_longest(query, T1, None)).system_hash == "sys-2"  # type: ignore[union-attr]
    await store.append(pos, [], None)  # None leaves it alone
    assert (await store.find_longest(query, T1, None)).system_hash == "sys-2"  # type: ignore[union-attr]


def _long_history(n: int, tag: str = "") -> list[Message]:
    return [user(f"{tag}m{i}") if i % 2 == 0 else assistant(f"{tag}m{i}") for i in range(n)]


async def test_find_longest_with_more_than_1000_hashes(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    history = _long_history(1200)
    await store.append(origin(conv), new_events(T1, history), None)
    main = conv.main_branch_id
    # Continues the stored history: the match is in the tail.
    query = identify.chain(T1, history + [user("next"), assistant("x"), user("y")])
    match = await store.find_longest(query, T1, None)
    assert match is not None and (match.position, match.count) == (Position(conv.id, main, 1200), 1200)
    # Diverges at 1100: the match is deep in the head, past the first batch of 900.
    edited = history[:1100] + _long_history(300, tag="edited-")
    match = await store.find_longest(identify.chain(T1, edited), T1, None)
    assert match is not None and (match.position, match.count) == (Position(conv.id, main, 1100), 1100)
    # Diverges early: the match is in the first batch.
    edited = history[:5] + _long_history(1500, tag="other-")
    match = await store.find_longest(identify.chain(T1, edited), T1, conv.id)
    assert match is not None and (match.position, match.count) == (Position(conv.id, main, 5), 5)


async def test_find_longest_many_hashes_only_first_stored(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    history = _long_history(2500)
    await store.append(origin(conv), new_events(T1, history[:1]), None)
    match = await store.find_longest(identify.chain(T1, history), T1, None)
    assert match is not None and (match.position, match.count) == (Position(conv.id, conv.main_branch_id, 1), 1)


# -- calls ----------------------------------------------------------------------------------------


def call_record(conv_id: str | None, branch_id: str | None, call_id: str, started_at: float, **kw: Any) -> CallRecord:
    fields: dict[str, Any] = dict(
        id=call_id,
        tenant=T1,
        route="main",
        model="gpt-4o-mini",
        purpose="main",
        stream=True,
        started_at=started_at,
        conversation_id=conv_id,
        branch_id=branch_id,
        status="complete",
        upstream_status=200,
        error=None,
        latency_ms=812.5,
        ttfb_ms=95.25,
        response={
            "role": "assistant",
            "content": "héllo",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        finish_reason="tool_calls",
        usage_raw={"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 100}},
        usage={
            "input_total": 120,
            "input_uncached": 20,
            "cache_read": 100,
            "cache_write": None,
            "output": 30,
            "reasoning": None,
        },
        request_id="req_abc",
        system_hash="sys-hash",
        tools_hash="tools-hash",
        projection={"kept": [1, 2], "summary": None, "tokens": 1234},
        wire="openai_chat",
    )
    fields.update(kw)
    return CallRecord(**fields)


async def test_record_and_list_calls_round_trip(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    first = call_record(conv.id, conv.main_branch_id, "call-1", 1000.5)
    second = call_record(
        conv.id,
        conv.main_branch_id,
        "call-2",
        1001.0,
        stream=False,
        status="error",
        upstream_status=None,
        error="upstream timed out",
        latency_ms=None,
        ttfb_ms=None,
        response=None,
        finish_reason=None,
        usage_raw=None,
        usage={
            "input_total": None,
            "input_uncached": None,
            "cache_read": None,
            "cache_write": None,
            "output": None,
            "reasoning": None,
        },
        request_id=None,
        system_hash=None,
        tools_hash=None,
        projection=None,
        purpose="summary",
        model=None,
        wire=None,  # a record written before the wire was kept
    )
    await store.record_call(second)
    await store.record_call(first)
    assert await store.list_calls(conv.id, 10, 0) == [first, second]
    assert await store.list_calls(conv.id, 1, 0) == [first]
    assert await store.list_calls(conv.id, 10, 1) == [second]
    assert await store.list_calls("c_unknown", 10, 0) == []


async def test_record_call_usage_zero_is_not_none(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    usage = {"input_total": 0, "input_uncached": 0, "cache_read": 0, "cache_write": None, "output": 0, "reasoning": 0}
    await store.record_call(call_record(conv.id, conv.main_branch_id, "z", 1.0, usage=usage))
    (got,) = await store.list_calls(conv.id, 10, 0)
    assert got.usage == usage


async def test_record_call_same_id_replaces(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    await store.record_call(call_record(conv.id, conv.main_branch_id, "call-1", 5.0, status="partial"))
    final = call_record(conv.id, conv.main_branch_id, "call-1", 5.0, status="complete")
    await store.record_call(final)
    assert await store.list_calls(conv.id, 10, 0) == [final]


async def test_record_call_without_conversation(store: Store) -> None:
    """A call no conversation owns is stored: the ledger, the only place it can be read back,
    counts it with its route, tenant, purpose, status and usage, under no conversation."""
    await store.record_call(call_record(None, None, "orphan", 1.0, status="error", route="side"))
    (cell,) = await store.usage_cells(UsageQuery(group_by="conversation"))
    assert (cell.key, cell.purpose, cell.status, cell.calls) == (None, "main", "error", 1)
    assert (cell.sums["input_total"], cell.sums["input_uncached"], cell.sums["output"]) == (120, 20, 30)
    assert cell.sums["cache_read"] == 100 and cell.sums["cache_write"] is None
    (by_route,) = await store.usage_cells(UsageQuery(route="side", group_by="route"))
    assert (by_route.key, by_route.calls) == ("side", 1)
    assert sum(c.calls for c in await store.usage_cells(UsageQuery(tenant=T1))) == 1
    assert await store.usage_cells(UsageQuery(tenant=T2)) == []


async def test_usage_groups_by_tenant_and_by_utc_day(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    other = await store.create_conversation(T2, None)
    day = 1_764_806_400.0  # 2025-12-04T00:00:00Z
    await store.record_call(call_record(conv.id, conv.main_branch_id, "d1", day + 10))
    await store.record_call(call_record(conv.id, conv.main_branch_id, "d2", day + 86_399))
    await store.record_call(call_record(other.id, other.main_branch_id, "d3", day + 86_400, tenant=T2))
    by_tenant = {c.key: c.calls for c in await store.usage_cells(UsageQuery(group_by="tenant"))}
    assert by_tenant == {T1: 2, T2: 1}
    by_day = {c.key: c.calls for c in await store.usage_cells(UsageQuery(group_by="day"))}
    assert by_day == {"2025-12-04": 2, "2025-12-05": 1}
    reference = cells_from_calls(
        [*await store.list_calls(conv.id, 10, 0), *await store.list_calls(other.id, 10, 0)], UsageQuery(group_by="day")
    )
    assert {c.key: c.calls for c in reference} == by_day


async def test_blobs_round_trip(store: Store) -> None:
    digest = identify.blob_hash("system text ü")
    assert await store.get_blob(digest) is None
    await store.put_blob(digest, "system text ü")
    await store.put_blob(digest, "system text ü")
    assert await store.get_blob(digest) == "system text ü"


async def test_calls_of_purpose_newest_first_across_tenants(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    other = await store.create_conversation(T2, None)
    await store.record_call(call_record(conv.id, conv.main_branch_id, "s1", 100.0, purpose="shadow"))
    await store.record_call(call_record(conv.id, conv.main_branch_id, "m1", 150.0))
    await store.record_call(call_record(other.id, other.main_branch_id, "s2", 200.0, purpose="shadow", tenant=T2))
    await store.record_call(call_record(None, None, "s3", 300.0, purpose="shadow"))
    await store.record_call(call_record(conv.id, conv.main_branch_id, "s0", 50.0, purpose="shadow"))
    assert [c.id for c in await store.calls_of_purpose("shadow", 100.0, 10)] == ["s3", "s2", "s1"]
    assert [c.id for c in await store.calls_of_purpose("shadow", 0.0, 2)] == ["s3", "s2"]
    assert [c.id for c in await store.calls_of_purpose("main", 0.0, 10)] == ["m1"]
    assert await store.delete_conversation(conv.id)
    assert [c.id for c in await store.calls_of_purpose("shadow", 0.0, 10)] == ["s3", "s2"]


async def test_last_call_by_branch_and_purpose(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    assert await store.last_call(main, "main") is None
    early = call_record(conv.id, main, "m1", 10.0)
    late = call_record(conv.id, main, "m2", 20.0)
    summary = call_record(conv.id, main, "s1", 30.0, purpose="summary")
    await store.append(origin(conv), new_events(T1, [U1, A1]), None)
    fork = await store.append(origin(conv), new_events(T1, [U2]), None)
    other = call_record(conv.id, fork.branch_id, "o1", 40.0)
    for call in (late, early, summary, other):
        await store.record_call(call)
    assert await store.last_call(main, "main") == late
    assert await store.last_call(main, "summary") == summary
    assert await store.last_call(fork.branch_id, "main") == other
    assert await store.last_call("b_unknown", "main") is None


def answer_event(history: list[Message], message: Message, call_id: str) -> NewEvent:
    return NewEvent("assistant", message, identify.chain(T1, [*history, message])[-1], "response", call_id=call_id)


async def test_record_answered_writes_the_record_and_the_turn(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    end = await store.append(origin(conv), new_events(T1, [U1]), None, stamp=False)
    before = await store.get_conversation(conv.id)
    await tick()
    call = call_record(conv.id, end.branch_id, "call-a", 10.0, response=A1)
    stored = await store.record_answered(call, ResponseTurn(end, "sys-a", answer_event([U1], A1, call.id)))
    assert stored == Position(conv.id, end.branch_id, 2)  # where the answer is
    assert await store.list_calls(conv.id, 10, 0) == [call]
    assert await store.last_call(end.branch_id, "main") == call
    assert await lineage(store, end.branch_id) == [(end.branch_id, 1, "u1"), (end.branch_id, 2, "a1")]
    after = await store.get_conversation(conv.id)
    assert before is not None and after is not None and after.updated_at > before.updated_at  # stamped
    # The answer is found, tenant-wide, with the system prefix it was called with.
    match = await store.find_longest(identify.chain(T1, [U1, A1, U2]), T1, None)
    assert match is not None and (match.position, match.count, match.system_hash) == (
        Position(conv.id, end.branch_id, 2),
        2,
        "sys-a",
    )
    # No whole answer (a partial stream): the record, and the stamp alone.
    partial = call_record(conv.id, end.branch_id, "call-b", 20.0, status="partial", response=None)
    later = Position(conv.id, end.branch_id, 2)
    assert await store.record_answered(partial, ResponseTurn(later, "sys-b", None)) is None
    assert [c.id for c in await store.list_calls(conv.id, 10, 0)] == ["call-a", "call-b"]
    assert len(await store.lineage_events(end.branch_id, 0, 10)) == 2
    match = await store.find_longest(identify.chain(T1, [U1, A1]), T1, None)
    assert match is not None and match.system_hash == "sys-b"


async def test_record_answered_returns_the_head_the_next_request_extends(store: Store) -> None:
    """What the proxy remembers for the conversation's next request (`Remembered.head`): the
    answer's position, on the request's branch or, when another request moved that branch's head
    meanwhile, on the fork the answer made."""
    conv = await store.create_conversation(T1, None)
    end = await store.append(origin(conv), new_events(T1, [U1]), None, stamp=False)
    call = call_record(conv.id, end.branch_id, "call-a", 10.0, response=A1)
    head = await store.record_answered(call, ResponseTurn(end, "s", answer_event([U1], A1, call.id)))
    assert head == Position(conv.id, conv.main_branch_id, 2)
    request = new_events(T1, [U1, A1, U2], start=2)
    end = await store.extend(head, chain_hash(T1, [U1, A1]), request)
    assert end == Position(conv.id, conv.main_branch_id, 3)
    # another request continues past the unanswered U2 before its answer is stored
    await store.append(end, new_events(T1, [U1, A1, U2, A3, U4], start=3), None, stamp=False)
    call = call_record(conv.id, end.branch_id, "call-b", 20.0, response=A2)
    head = await store.record_answered(call, ResponseTurn(end, "s", answer_event([U1, A1, U2], A2, call.id)))
    assert head is not None and head.branch_id != conv.main_branch_id and head.seq == 4
    after = new_events(T1, [U1, A1, U2, A2, U3], start=4)
    assert await store.extend(head, chain_hash(T1, [U1, A1, U2, A2]), after) == Position(conv.id, head.branch_id, 5)
    assert await lineage(store, head.branch_id) == [
        (conv.main_branch_id, 1, "u1"),
        (conv.main_branch_id, 2, "a1"),
        (conv.main_branch_id, 3, "u2"),
        (head.branch_id, 4, "a2"),
        (head.branch_id, 5, "u3"),
    ]
    # a turn without an answer stores no event: no new head
    partial = call_record(conv.id, head.branch_id, "call-c", 30.0, status="partial", response=None)
    end = Position(conv.id, head.branch_id, 5)
    assert await store.record_answered(partial, ResponseTurn(end, "s", None)) is None


async def test_record_answered_keeps_the_record_when_the_turn_is_refused(store: Store) -> None:
    """Two identical requests in flight fork one branch; the first is rejected and retracts it,
    then the second is answered: its turn has nowhere to go, its record is stored all the same."""
    conv = await store.create_conversation(T1, None)
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), "s")
    before = await _snapshot(store, conv.id)
    request = new_events(T1, [U1, A1, U3], start=2)
    end = await store.append(Position(conv.id, conv.main_branch_id, 2), request, None, stamp=False)
    assert await store.retract(end, [e.chain_hash for e in request]) is True
    call = call_record(conv.id, end.branch_id, "call-late", 10.0, response=A3)
    refused = await store.record_answered(call, ResponseTurn(end, "s", answer_event([U1, A1, U3], A3, call.id)))
    assert isinstance(refused, StoreError) and not isinstance(refused, ConversationGone)
    assert await store.list_calls(conv.id, 10, 0) == [call]
    assert await _snapshot(store, conv.id) == before


async def test_record_answered_to_a_deleted_conversation_writes_nothing(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    end = await store.append(origin(conv), new_events(T1, [U1]), None, stamp=False)
    assert await store.delete_conversation(conv.id) is True
    call = call_record(conv.id, end.branch_id, "call-late", 10.0, response=A1)
    with pytest.raises(ConversationGone):
        await store.record_answered(call, ResponseTurn(end, "s", answer_event([U1], A1, call.id)))
    assert await store.get_conversation(conv.id) is None
    assert await store.list_calls(conv.id, 10, 0) == []
    assert await store.find_longest(identify.chain(T1, [U1, A1]), T1, None) is None


# -- checkpoints ----------------------------------------------------------------------------------


def candidate(
    conv: Any, branch_id: str, parent: int, through: int, source_hash: str, summary: str = "s", from_seq: int = 1
) -> CheckpointCandidate:
    return CheckpointCandidate(
        conversation_id=conv.id,
        branch_id=branch_id,
        parent_generation=parent,
        from_seq=from_seq,
        covered_through_seq=through,
        source_hash=source_hash,
        summary=summary,
        tokens=42,
        model="summarizer-x",
        format_version=1,
    )


HISTORY = [U1, A1, U2, A2, U3]


async def test_checkpoint_commit_and_supersede(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    hashes = identify.chain(T1, HISTORY)
    await store.append(origin(conv), new_events(T1, HISTORY), None)
    assert await store.active_checkpoint(main) is None
    first = await store.commit_checkpoint(candidate(conv, main, 0, 2, hashes[1], "first"))
    assert first is not None
    assert (first.generation, first.status, first.covered_through_seq, first.source_hash, first.summary) == (
        1,
        "active",
        2,
        hashes[1],
        "first",
    )
    assert (
        first.conversation_id,
        first.branch_id,
        first.from_seq,
        first.tokens,
        first.model,
        first.format_version,
    ) == (conv.id, main, 1, 42, "summarizer-x", 1)
    assert await store.active_checkpoint(main) == first
    second = await store.commit_checkpoint(candidate(conv, main, 1, 4, hashes[3], "second"))
    assert second is not None and second.generation == 2
    assert await store.active_checkpoint(main) == second
    assert [(c.generation, c.status) for c in await store.list_checkpoints(conv.id)] == [
        (1, "superseded"),
        (2, "active"),
    ]


async def test_stale_checkpoint_candidates_are_discarded(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    hashes = identify.chain(T1, HISTORY)
    await store.append(origin(conv), new_events(T1, HISTORY), None)
    winner = await store.commit_checkpoint(candidate(conv, main, 0, 2, hashes[1], "winner"))
    assert winner is not None
    # A second job that started from generation 0 lost the race.
    assert await store.commit_checkpoint(candidate(conv, main, 0, 4, hashes[3], "late")) is None
    # A parent generation from the future is just as wrong.
    assert await store.commit_checkpoint(candidate(conv, main, 5, 4, hashes[3], "future")) is None
    # The covered range changed under it (the source hash does not match the event at that seq).
    assert await store.commit_checkpoint(candidate(conv, main, 1, 4, hashes[2], "moved")) is None
    assert await store.commit_checkpoint(candidate(conv, main, 1, 9, hashes[3], "past-head")) is None
    assert await store.active_checkpoint(main) == winner
    assert [c.summary for c in await store.list_checkpoints(conv.id)] == ["winner"]


async def test_failed_checkpoint_is_recorded_and_changes_nothing(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    hashes = identify.chain(T1, HISTORY)
    await store.append(origin(conv), new_events(T1, HISTORY), None)
    active = await store.commit_checkpoint(candidate(conv, main, 0, 2, hashes[1]))
    await store.record_failed_checkpoint(candidate(conv, main, 1, 4, hashes[3], "bad"), "summary had no goal")
    assert await store.active_checkpoint(main) == active
    statuses = [(c.status, c.error) for c in await store.list_checkpoints(conv.id)]
    assert statuses == [("active", None), ("failed", "summary had no goal")]
    # A failure does not consume the generation.
    nxt = await store.commit_checkpoint(candidate(conv, main, 1, 4, hashes[3]))
    assert nxt is not None and nxt.generation == 2


async def test_child_branch_inherits_only_checkpoints_before_its_fork(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    hashes = identify.chain(T1, HISTORY)
    await store.append(origin(conv), new_events(T1, HISTORY), None)
    early = await store.commit_checkpoint(candidate(conv, main, 0, 2, hashes[1], "early"))
    late = await store.commit_checkpoint(candidate(conv, main, 1, 4, hashes[3], "late"))
    assert early is not None and late is not None
    # Fork after seq 3 (u1 a1 u2 | a2'): `late` covers seq 4, which the child does not share.
    child = await store.append(origin(conv), new_events(T1, [U1, A1, U2, assistant("a2-edited")]), None)
    assert child.branch_id != main
    inherited = await store.active_checkpoint(child.branch_id)
    assert inherited is not None and inherited.id == early.id
    assert await store.active_checkpoint(main) == late
    # The child commits on top of what it inherited, covering an event of its parent's segment.
    own = await store.commit_checkpoint(candidate(conv, child.branch_id, early.generation, 3, hashes[2], "child"))
    assert own is not None and own.branch_id == child.branch_id
    assert await store.active_checkpoint(child.branch_id) == own
    assert await store.active_checkpoint(main) == late


async def test_checkpoint_writes_to_a_deleted_conversation_are_refused(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    hashes = identify.chain(T1, HISTORY)
    await store.append(origin(conv), new_events(T1, HISTORY), None)
    await store.commit_checkpoint(candidate(conv, main, 0, 2, hashes[1]))
    assert await store.delete_conversation(conv.id) is True
    assert await store.list_checkpoints(conv.id) == []
    assert await store.active_checkpoint(main) is None
    with pytest.raises(ConversationGone):
        await store.commit_checkpoint(candidate(conv, main, 1, 4, hashes[3]))
    with pytest.raises(ConversationGone):
        await store.record_failed_checkpoint(candidate(conv, main, 1, 4, hashes[3]), "late")
    assert await store.list_checkpoints(conv.id) == []


# -- delete ---------------------------------------------------------------------------------------


async def test_delete_conversation_removes_everything(store: Store) -> None:
    conv = await store.create_conversation(T1, "to-delete")
    keep = await store.create_conversation(T1, "to-keep")
    main = conv.main_branch_id
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), "s")
    child = await store.append(origin(conv), new_events(T1, [U1, A1, U3]), "s")
    await store.record_call(call_record(conv.id, main, "call-del", 1.0))
    await store.append(origin(keep), new_events(T1, [U1, A1]), "s")
    await store.record_call(call_record(keep.id, keep.main_branch_id, "call-keep", 2.0))

    assert await store.delete_conversation(conv.id) is True

    assert await store.get_conversation(conv.id) is None
    assert await store.find_conversation(T1, conv.id) is None
    assert await store.find_conversation(T1, "to-delete") is None
    assert await store.list_branches(conv.id) == []
    assert await store.lineage_events(main, 0, 100) == []
    assert await store.lineage_events(child.branch_id, 0, 100) == []
    assert await store.list_calls(conv.id, 10, 0) == []
    assert await store.find_longest(identify.chain(T1, [U1, A1, U2]), T1, conv.id) is None
    assert [c.id for c in await store.list_conversations(100, None)] == [keep.id]
    # The other conversation is untouched, and now answers the shared prefix.
    match = await store.find_longest(identify.chain(T1, [U1, A1, U2]), T1, None)
    assert match is not None and (match.position, match.count) == (Position(keep.id, keep.main_branch_id, 2), 2)
    assert len(await store.list_calls(keep.id, 10, 0)) == 1
    # Deleting again, or something unknown, finds nothing.
    assert await store.delete_conversation(conv.id) is False
    assert await store.delete_conversation("c_never_existed") is False


async def test_late_writes_to_a_deleted_conversation_are_refused(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    pos = await store.append(origin(conv), new_events(T1, [U1, A1]), None)
    assert await store.delete_conversation(conv.id) is True
    with pytest.raises(ConversationGone):
        await store.append(pos, new_events(T1, [U1, A1, U2], start=2), None)
    with pytest.raises(ConversationGone):
        await store.append(origin(conv), new_events(T1, [U1]), None)
    with pytest.raises(ConversationGone):
        await store.append(pos, [], "sys")
    with pytest.raises(ConversationGone):
        await store.record_call(call_record(conv.id, conv.main_branch_id, "late", 3.0))
    # Nothing came back.
    assert await store.get_conversation(conv.id) is None
    assert await store.list_calls(conv.id, 10, 0) == []
    assert await store.lineage_events(conv.main_branch_id, 0, 10) == []


async def test_external_id_reusable_after_delete(store: Store) -> None:
    old = await store.create_conversation(T1, "reuse")
    await store.delete_conversation(old.id)
    new = await store.create_conversation(T1, "reuse")
    assert new.id != old.id
    assert await store.find_conversation(T1, "reuse") == new


# -- listing --------------------------------------------------------------------------------------


async def test_list_conversations_ordering_and_limit(store: Store) -> None:
    c1 = await store.create_conversation(T1, None)
    await tick()
    c2 = await store.create_conversation(T2, None)
    await tick()
    c3 = await store.create_conversation(T1, "x")
    await tick()
    await store.append(origin(c1), new_events(T1, [U1]), None)
    listed = await store.list_conversations(10, None)
    assert [c.id for c in listed] == [c1.id, c3.id, c2.id]
    assert listed[0].updated_at > c1.created_at
    assert [c.id for c in await store.list_conversations(2, None)] == [c1.id, c3.id]
    assert [c.id for c in await store.list_conversations(10, listed[1].updated_at)] == [c2.id]
    assert await store.list_conversations(10, c2.updated_at) == []


async def test_list_branches_in_creation_order(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), None)
    await tick()
    b1 = await store.append(origin(conv), new_events(T1, [U1, A1, U3]), None)
    await tick()
    b2 = await store.append(origin(conv), new_events(T1, [U4]), None)
    branches = await store.list_branches(conv.id)
    assert [b.id for b in branches] == [conv.main_branch_id, b1.branch_id, b2.branch_id]
    assert all(isinstance(b, Branch) for b in branches)
    assert [b.to_dict()["parent_id"] for b in branches] == [None, conv.main_branch_id, conv.main_branch_id]


# -- durability -----------------------------------------------------------------------------------


async def test_data_survives_close_and_reopen(stores: Stores, store: Store) -> None:
    salt = await store.tenant_salt()
    conv = await store.create_conversation(T1, "durable")
    await store.append(origin(conv), new_events(T1, [U1, A1, U2]), "sys")
    child = await store.append(origin(conv), new_events(T1, [U1, A1, U3]), "sys")
    call = call_record(conv.id, child.branch_id, "call-d", 7.0)
    await store.record_call(call)
    conv_after = await store.get_conversation(conv.id)
    branches = await store.list_branches(conv.id)
    events = await store.lineage_events(child.branch_id, 0, 100)

    reopened = await stores.reopen(store)

    assert await reopened.tenant_salt() == salt
    assert await reopened.get_conversation(conv.id) == conv_after
    assert await reopened.find_conversation(T1, "durable") == conv_after
    assert await reopened.list_branches(conv.id) == branches
    assert await reopened.lineage_events(child.branch_id, 0, 100) == events
    assert await reopened.list_calls(conv.id, 10, 0) == [call]
    match = await reopened.find_longest(identify.chain(T1, [U1, A1, U3, A3]), T1, None)
    assert match == HashMatch(child, 3, "sys")
    # And it still appends where it left off.
    assert await reopened.append(child, new_events(T1, [U1, A1, U3, A3], start=3), None) == Position(
        conv.id, child.branch_id, 4
    )


# -- compaction leases ----------------------------------------------------------------------------


async def test_lease_acquire_is_exclusive_and_tokens_increase(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    first = await store.acquire_lease(main, "replica-a", 30)
    assert first is not None
    assert await store.acquire_lease(main, "replica-b", 30) is None
    assert await store.renew_lease(main, "replica-a", first, 30) is True
    assert await store.renew_lease(main, "replica-b", first, 30) is False
    assert await store.renew_lease(main, "replica-a", first + 1, 30) is False
    await store.release_lease(main, "replica-a", first)
    second = await store.acquire_lease(main, "replica-b", 30)
    assert second is not None and second > first
    # Leases are per branch; an unknown branch has none to give.
    other = await store.create_conversation(T1, None)
    assert await store.acquire_lease(other.main_branch_id, "replica-a", 30) is not None
    assert await store.acquire_lease("b_never_existed", "replica-a", 30) is None


async def test_lease_expires_and_is_taken_over_with_a_higher_token(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    old = await store.acquire_lease(main, "replica-a", 0.05)
    assert old is not None
    await asyncio.sleep(0.15)
    assert await store.renew_lease(main, "replica-a", old, 30) is False  # expired: renew cannot revive it
    new = await store.acquire_lease(main, "replica-b", 30)
    assert new is not None and new > old
    # The stale owner's release does nothing: replica-b still holds the lease.
    await store.release_lease(main, "replica-a", old)
    assert await store.acquire_lease(main, "replica-c", 30) is None
    assert await store.renew_lease(main, "replica-b", new, 30) is True


async def test_commit_with_a_taken_over_lease_token_is_rejected(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    hashes = identify.chain(T1, HISTORY)
    await store.append(origin(conv), new_events(T1, HISTORY), None)
    old = await store.acquire_lease(main, "replica-a", 0.05)
    assert old is not None
    await asyncio.sleep(0.15)
    new = await store.acquire_lease(main, "replica-b", 30)
    assert new is not None
    late = dataclasses.replace(candidate(conv, main, 0, 2, hashes[1], "late"), lease_token=old)
    assert await store.commit_checkpoint(late) is None
    assert await store.list_checkpoints(conv.id) == []
    fresh = dataclasses.replace(candidate(conv, main, 0, 2, hashes[1], "fresh"), lease_token=new)
    committed = await store.commit_checkpoint(fresh)
    assert committed is not None and committed.summary == "fresh"
    # Without a token only the generation and source hash fence the commit.
    assert await store.commit_checkpoint(candidate(conv, main, 1, 4, hashes[3], "unleased")) is not None


async def test_delete_removes_leases(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    assert await store.acquire_lease(main, "replica-a", 30) is not None
    assert await store.delete_conversation(conv.id) is True
    assert await store.acquire_lease(main, "replica-b", 30) is None


# -- retention ------------------------------------------------------------------------------------


async def test_purge_calls_before_a_time(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    await store.record_call(call_record(conv.id, main, "call-old", 100.0))
    await store.record_call(call_record(conv.id, main, "call-old-summary", 150.0, purpose="summary"))
    await store.record_call(call_record(None, None, "call-old-anon", 120.0))
    await store.record_call(call_record(conv.id, main, "call-new", 300.0))
    assert await store.purge_calls(200.0) == 3
    assert [c.id for c in await store.list_calls(conv.id, 10, 0)] == ["call-new"]
    assert await store.last_call(main, "summary") is None
    last = await store.last_call(main, "main")
    assert last is not None and last.id == "call-new"
    cells = await store.usage_cells(UsageQuery())
    assert sum(c.calls for c in cells) == 1
    assert await store.purge_calls(200.0) == 0


async def test_purge_checkpoints_keeps_active_ones(store: Store) -> None:
    conv = await store.create_conversation(T1, None)
    main = conv.main_branch_id
    hashes = identify.chain(T1, HISTORY)
    await store.append(origin(conv), new_events(T1, HISTORY), None)
    first = await store.commit_checkpoint(candidate(conv, main, 0, 2, hashes[1], "first"))
    await store.record_failed_checkpoint(candidate(conv, main, 1, 4, hashes[3], "bad"), "rejected")
    second = await store.commit_checkpoint(candidate(conv, main, 1, 4, hashes[3], "second"))
    assert first is not None and second is not None
    assert await store.purge_checkpoints(first.created_at - 10) == 0
    assert await store.purge_checkpoints(time.time() + 10) == 2
    assert [(c.summary, c.status) for c in await store.list_checkpoints(conv.id)] == [("second", "active")]
    assert await store.active_checkpoint(main) == second
    third = await store.commit_checkpoint(candidate(conv, main, 2, 5, hashes[4], "third"))
    assert third is not None and third.generation == 3


async def test_stale_conversations_oldest_first(store: Store) -> None:
    old = await store.create_conversation(T1, None)
    await tick()
    mid = await store.create_conversation(T2, None)
    await tick()
    cutoff = time.time()
    await tick()
    new = await store.create_conversation(T1, None)
    assert await store.stale_conversations(cutoff, 10) == [old.id, mid.id]
    assert await store.stale_conversations(cutoff, 1) == [old.id]
    # Activity moves a conversation out of the stale set.
    await store.append(origin(old), new_events(T1, [U1]), None)
    assert await store.stale_conversations(cutoff, 10) == [mid.id]
    assert await store.stale_conversations(time.time() + 1, 10) == [mid.id, new.id, old.id]

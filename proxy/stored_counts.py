"""Token counts stored with the events, read back for a history no per-process cache counted.

Problem: the token counter keeps counts by event hash in a bounded cache, and the history cache
keeps whole counted histories. With more conversations in use than they hold, a request finds
neither and counts every message of its history again with tiktoken: the largest part of what
such a request costs, for messages the store already holds.

So every event is stored with its count (`NewEvent.tokens`: the request's new messages when
`ingest` appends them, the answer when it is stored) in one encoding, `ENCODING`, the one of
the gpt-4o/4.1/5 families and of every model tiktoken does not know. A request counted in that
encoding whose history has at least `MIN_READ` messages the counter does not hold reads its
lineage once (`Store.lineage_events`), and the projection's items take the counts stored there
(`Projector.items`); it counts only what has none. Another encoding stores and reads nothing (the
column stays null).

Invariant: a stored count serves a message of the request only when that message reads the
same to `count_message` as the stored one (`policies.tokens.counted`), never by chain hash
alone: identity matches an answer the client re-sent in another spelling (its tool-call
arguments re-serialized, its tool calls rendered as text) by hash, and such a message is
counted itself, as it would be without the store. Counts are derived state: a store that fails
to answer costs the count, not the request.

Example: 1,024 agents take turns on a proxy whose caches hold about 200 of their histories; a
request of a 500-message conversation no cache holds reads its 500 stored counts in one query
instead of encoding 500 messages.
"""

from __future__ import annotations

from policies.tokens import count_message, counted

from .errors import StoreError
from .history_cache import Remembered
from .store.base import Position, Store
from .token_counter import TokenCounter
from .types import Message

ENCODING = "o200k_base"
"""The encoding of the counts stored with the events."""
MIN_READ = 32
"""Messages a request's counter must lack before their stored counts are read: below it,
counting them costs less than the read."""


def storing(counter: TokenCounter) -> TokenCounter | None:
    """`counter` when the events are stored with its counts, else None."""
    return counter if counter.encoding.name == ENCODING else None


def answer_tokens(counter: TokenCounter | None, message: Message) -> int | None:
    """The count an answer is stored with. Counted apart from the counter's cache: the client
    may send the answer back in another spelling under the same chain hash, and that one is
    counted as it is sent."""
    return count_message(message, counter.encoding) if counter is not None else None


async def read(
    store: Store,
    counter: TokenCounter,
    known: Remembered | None,
    history: list[Message],
    hashes: list[str],
    position: Position,
) -> dict[str, int]:
    """The stored counts, by chain hash, of the messages of `history` (stored up to `position`)
    that neither `known` nor the counter holds counted; empty when fewer than `MIN_READ` are
    missing, or the counter counts in another encoding."""
    if counter.encoding.name != ENCODING:
        return {}
    start = len(known.items.get(ENCODING, ())) if known is not None else 0
    missing = [i for i in range(start, len(hashes)) if not counter.holds(hashes[i])]
    if len(missing) < MIN_READ:
        return {}
    try:
        events = await store.lineage_events(position.branch_id, 0, position.seq)
    except StoreError:
        return {}
    stored = {event.chain_hash: event for event in events if event.tokens is not None}
    counts: dict[str, int] = {}
    for i in missing:
        event = stored.get(hashes[i])
        if event is not None and event.tokens is not None and counted(event.message) == counted(history[i]):
            counts[hashes[i]] = event.tokens
    return counts

"""Token counts stored with the events, read back for a history no per-process cache counted.

Problem: the token counter keeps counts by event hash in a bounded cache, and the history cache
keeps whole counted histories. With more conversations in use than they hold, a request finds
neither and counts every message of its history again with tiktoken: the largest part of what
such a request costs, for messages the store already holds.

So every event is stored with its count (`NewEvent.tokens`: the request's new messages when
`ingest` appends them, the answer when it is stored) in one encoding, `ENCODING`, the one of
the gpt-4o/4.1/5 families and of every model tiktoken does not know. A request counted in that
encoding whose history has messages of one spelling (below) the counter does not hold reads its
lineage's counts once (`Store.lineage_counts`), and the projection's items take them
(`Projector.items`); it counts only what has none. Any such message, not just many: with the
conversations taken in turn, the one a request serves is the least recently used in the
counter, and each count it missed would evict the next of its own. Another encoding stores and reads nothing (the
column stays null).

Invariant: a count is stored, and a stored count taken, only for a message of one spelling
(`one_spelling`: text content or none, no tool calls, no answer rendered as text): two such
messages with one chain hash read the same to `count_message` (identity ignores only what the
count reads as nothing: empty values, annotations), so the count goes by hash with no message
read. Any other message -- tool-call arguments identity compares parsed, content parts with a
transient one dropped, a rendering -- is counted as the client sent it, as without the store.
Counts are derived state: a store that fails to answer costs the count, not the request.

Example: 1,024 agents take turns on a proxy whose caches hold about 200 of their histories; a
request of a 500-message conversation no cache holds reads its 500 stored counts in one query
instead of encoding 500 messages.
"""

from __future__ import annotations

from policies.tokens import count_message

from . import renderings
from .errors import StoreError
from .history_cache import Remembered
from .store.base import Store
from .token_counter import TokenCounter
from .types import Message

ENCODING = "o200k_base"
"""The encoding of the counts stored with the events."""


def storing(counter: TokenCounter) -> TokenCounter | None:
    """`counter` when the events are stored with its counts, else None."""
    return counter if counter.encoding.name == ENCODING else None


def one_spelling(message: Message) -> bool:
    """Whether `message` is of one spelling: any other such message with its chain hash reads
    the same to `count_message` (module docstring)."""
    content = message.get("content")
    return (
        (content is None or isinstance(content, str))
        and not message.get("tool_calls")
        and renderings.rendered_answer(message) is None
    )


def tokens(counter: TokenCounter | None, message: Message, chain_hash: str) -> int | None:
    """The count a request's new event is stored with (through the counter, which the
    projection then finds holding it); None without a counter or for a message of more spellings."""
    return counter.count(message, chain_hash) if counter is not None and one_spelling(message) else None


def answer_tokens(counter: TokenCounter | None, message: Message) -> int | None:
    """The count an answer is stored with. Counted apart from the counter's cache, by the
    message as the upstream gave it: the projection counts the client's copy."""
    if counter is None or not one_spelling(message):
        return None
    return count_message(message, counter.encoding)


async def read(
    store: Store,
    counter: TokenCounter,
    known: Remembered | None,
    history: list[Message],
    hashes: list[str],
    branch_id: str,
) -> dict[str, int]:
    """The counts, by chain hash, of the messages of one spelling in `history` (stored on the
    lineage of `branch_id`) that neither `known` nor the counter holds counted: the answer
    `known` was answered with, as it was stored, and the rest read from the store (no read
    when there is none, or when the counter counts in another encoding)."""
    if counter.encoding.name != ENCODING:
        return {}
    start = len(known.items.get(ENCODING, ())) if known is not None else 0
    missing = [i for i in range(start, len(hashes)) if not counter.holds(hashes[i]) and one_spelling(history[i])]
    counts: dict[str, int] = {}
    answer = known.answer if known is not None else None
    if answer is not None and missing and hashes[missing[0]] == answer[0]:
        counts[answer[0]] = answer[1]
        missing = missing[1:]
    if not missing:
        return counts
    try:
        stored = await store.lineage_counts(branch_id)
    except StoreError:
        return counts
    for i in missing:
        count = stored.get(hashes[i])
        if count is not None:
            counts[hashes[i]] = count
    return counts

"""Per-process memory of recent request histories, so a request costs work for what is new.

Chat clients re-send the whole history every turn. Hashing it (the identity chain) and counting
its tokens are pure functions of the messages, and most of each request equals the previous
request of the same conversation. This cache keeps, per recent history, the client's message
objects with their chain hashes and token-counted `Item`s. A new request whose history starts
with a remembered history (one C-level list comparison: `history[:n] == remembered`) reuses
those and hashes/counts only the rest.

Everything cached is derived from message content alone, never from the store, so it cannot go
stale when another replica moves the conversation on: a hit only skips recomputing what the
content already determines. (Python equality treats `1`, `1.0` and `true` alike; a client that
changes a field between those spellings at the same position gets the earlier hash for it.)
The one exception is `Remembered.head`, where the answered request left its branch: the next
request of the conversation appends there without looking its history up, through
`Store.extend`, which refuses unless the head is still exactly what the lookup would find (so a
head another writer moved costs only the lookup it would have cost anyway).

Candidates are found by a cheap hash of the first history message (plus tenant), most recent first.
Memory is bounded by the approximate bytes of the remembered bodies; which history goes when it
is exceeded is `proxy.eviction`'s choice (least recently used, unless every one is in use).

Beside the histories it keeps, per caller credential, the raw bytes of recent request bodies with
where their message array ends (`Seen`, read by `tail_parse`: a body that extends one of them
byte for byte is parsed only in its new tail). Their bytes count in the same budget, and they go
first when it is exceeded: a history saves more work per byte (hashing, counting and the branch
memo's resume, against one parse). Once the histories alone fill the budget, each body goes as
soon as the next is stored. (One least-recently-stored order for both was measured and dropped:
it halves the conversations whose histories fit, and with more conversations in use than fit,
an LRU hits nothing: 256 conversations of 500 messages cost 13 ms a request against 2.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from policies.base import Item
from policies.history import SharedPrefix

from . import identify
from .eviction import Eviction
from .store.base import Position
from .types import Message, SentBody


@dataclass(frozen=True)
class Head:
    """Where a remembered history's branch stood after its request: the stored position of its
    last event (the answer, once one was stored), that event's chain hash and how many chain
    hashes lead to it. Read from the store, so possibly stale: it is only ever
    used through `Store.extend`, which refuses a head another writer moved."""

    position: Position
    chain_hash: str
    count: int


@dataclass
class Remembered:
    messages: list[Message]
    hashes: list[str]
    size: int
    items: dict[str, list[Item]] = field(default_factory=dict)
    """Token-counted items of the same messages, by tokenizer encoding name."""
    shared: dict[str, SharedPrefix] = field(default_factory=dict)
    """How each list of `items` was built from the remembered list it extends (the proof the
    branch's projection memo resumes on without comparing the shared items), by encoding name."""
    head: Head | None = None
    """Set by `ingest`: the request's last event, then its answer once stored."""
    prefix: list[Message] = field(default_factory=list)
    """The system prefix the request sent before `messages` (`identify.split_prefix`)."""
    system_hash: str | None = None
    """`identify.prefix_hash(prefix)`, reused by the next request with an equal prefix."""
    encoded: SentBody | None = None
    """The body last sent upstream with these messages (as the very objects it holds), written
    and reused by the chat wire's `encode_body` (`protocols/openai_chat/encode.py`)."""


@dataclass(eq=False)
class Seen:
    """A request body as received, with where its top-level message array is (see `tail_parse`)."""

    raw: bytes
    start: int
    """Offset of the array's `[`."""
    close: int
    """Offset of the `]` that closes it."""
    proven: bool
    """Whether `close` is proven the array's end (else it is the candidate the next body proves)."""
    rest: dict[str, Any]
    """The parsed body, its array's value aside (the key keeps its place)."""
    items: list[Any]
    """The parsed array."""
    derived: dict[str, Any] = field(default_factory=dict)
    """What a wire computed from `items` (e.g. their common-model messages), by wire name, for
    the next body that extends this one (`BodyMemo.derived`)."""

    @property
    def size(self) -> int:
        """The raw bytes and, about as much again, the parsed values they keep alive."""
        return 2 * len(self.raw)


class HistoryCache:
    def __init__(self, max_bytes: int = 256 * 1024 * 1024, per_key: int = 4) -> None:
        self.max_bytes = max_bytes
        self.per_key = per_key
        self._entries: dict[tuple[str, int], list[Remembered]] = {}
        self._order: Eviction[tuple[str, int]] = Eviction()
        self._bodies: OrderedDict[bytes, list[Seen]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.body_hits = 0
        """Bodies parsed only in their new tail (`tail_parse.BodyMemo.parse`); `body_misses`: whole."""
        self.body_misses = 0

    @staticmethod
    def key(tenant: str, history: list[Message]) -> tuple[str, int] | None:
        """Where the candidates for `history` are kept. A hit is confirmed by comparing the
        messages themselves, so the key need only be cheap and equal for equal first messages:
        Python's hash of the first message's text (its repr when the content is not a string),
        not the chain hash, which serializes the message (a 20 kB task prompt cost 0.17 ms,
        twice per request)."""
        if not history or not isinstance(history[0], dict):
            return None
        first = history[0]
        content = first.get("content")
        return tenant, hash(content) if isinstance(content, str) else hash(repr(first))

    def lookup(self, tenant: str, history: list[Message]) -> Remembered | None:
        """The longest remembered history of this tenant that `history` starts with."""
        key = self.key(tenant, history)
        if key is None:
            return None
        with self._lock:
            candidates = list(self._entries.get(key, ()))
        best: Remembered | None = None
        for entry in candidates:
            n = len(entry.messages)
            if n <= len(history) and (best is None or n > len(best.messages)) and history[:n] == entry.messages:
                best = entry
        if best is None:
            self.misses += 1
        else:
            self.hits += 1
        return best

    def hashes(self, tenant: str, history: list[Message], known: Remembered | None) -> list[str]:
        """The identity chain of `history`, hashing only what `known` does not cover."""
        if known is None or not known.hashes:
            return identify.chain(tenant, history)
        n = len(known.hashes)
        return known.hashes + identify.chain_from(known.hashes[-1], history[n:])

    @staticmethod
    def prefix_hash(prefix: list[Message], known: Remembered | None) -> str:
        """`identify.prefix_hash(prefix)`, the remembered one when `known` had an equal prefix
        (agents send the same system prompt every turn: a 5 kB one costs 44 us to hash)."""
        if known is not None and known.system_hash is not None and prefix == known.prefix:
            return known.system_hash
        return identify.prefix_hash(prefix)

    def remember(self, tenant: str, entry: Remembered) -> None:
        key = self.key(tenant, entry.messages)
        if key is None:
            return
        with self._lock:
            bucket = self._entries.pop(key, [])
            # A longer history of the same conversation supersedes the one it extends.
            kept = [e for e in bucket if not _extends(entry, e)]
            continued = len(kept) < len(bucket)
            for dropped in bucket:
                if dropped not in kept:
                    self._bytes -= dropped.size
            kept.insert(0, entry)
            while len(kept) > self.per_key:
                self._bytes -= kept.pop().size
            self._entries[key] = kept
            # the conversation went on from a remembered history: a hit, for the eviction
            (self._order.hit if continued else self._order.touch)(key)
            self._bytes += entry.size
            self._evict(key)

    def sizes(self) -> dict[str, int]:
        """Entries held now (`ctxproxy_cache_entries`): remembered histories and bodies."""
        with self._lock:
            return {
                "histories": sum(len(b) for b in self._entries.values()),
                "bodies": sum(len(b) for b in self._bodies.values()),
            }

    def lookups(self) -> dict[tuple[str, ...], float]:
        """Lookups so far by (cache, outcome) (`ctxproxy_cache_lookups_total`)."""
        return {
            ("histories", "hit"): self.hits,
            ("histories", "miss"): self.misses,
            ("bodies", "hit"): self.body_hits,
            ("bodies", "miss"): self.body_misses,
        }

    def bodies(self, partition: bytes) -> list[Seen]:
        """The recent bodies sent with this credential digest, most recent first."""
        with self._lock:
            return list(self._bodies.get(partition, ()))

    def remember_body(self, partition: bytes, seen: Seen, replaces: Seen | None = None) -> None:
        """Keep `seen` (the newest of its partition), dropping `replaces`, the body it extends."""
        with self._lock:
            bucket = self._bodies.pop(partition, [])
            if replaces is not None and replaces in bucket:
                bucket.remove(replaces)
                self._bytes -= replaces.size
            bucket.insert(0, seen)
            self._bytes += seen.size
            while len(bucket) > self.per_key * 4:
                self._bytes -= bucket.pop().size
            self._bodies[partition] = bucket
            self._evict()

    def forget_body(self, partition: bytes, seen: Seen) -> None:
        with self._lock:
            bucket = self._bodies.get(partition, [])
            if seen in bucket:
                bucket.remove(seen)
                self._bytes -= seen.size

    def _evict(self, newest: tuple[str, int] | None = None) -> None:
        while self._bytes > self.max_bytes and (self._bodies or self._entries):
            if self._bodies:
                _, bodies = self._bodies.popitem(last=False)
                self._bytes -= sum(b.size for b in bodies)
                continue
            key = self._order.evict(newest)
            if key is None:
                return
            self._bytes -= sum(e.size for e in self._entries.pop(key, ()))


def _extends(longer: Remembered, shorter: Remembered) -> bool:
    n = len(shorter.hashes)
    return n <= len(longer.hashes) and (n == 0 or longer.hashes[n - 1] == shorter.hashes[-1])

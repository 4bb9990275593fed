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

Candidates are found by a cheap hash of the first history message (plus tenant). Many
conversations can share it (agents started in one repository or by one harness open alike), so
a key holds up to `per_key` histories, one per conversation: a history takes the place of the
one it continues. Memory is bounded by the approximate bytes the remembered histories hold. Which
history goes, when a key or the budget is full, is `proxy.eviction`'s choice (least recently
used, unless every one is in use), one history at a time: 8 conversations opening alike through
4 places keep 3 hitting, where a key evicted whole, or an LRU, would keep none.

Beside the histories it keeps, per caller credential (up to `bodies_per_credential`, one per
conversation, chosen the same way), the raw bytes of recent request bodies with where their
message array ends (`Seen`, read by `tail_parse`: a body that extends one of them byte for byte
is parsed only in its new tail). Their bytes count in the same budget, and they go first when it
is exceeded, from the credential least recently stored to: a history saves more work per byte
(hashing, counting and the branch memo's resume, against one parse). Once the histories alone
fill the budget, each body goes as soon as the next is stored. (Not one least-recently-stored
order for both: it would halve the conversations whose histories fit, and with more
conversations in use than fit, an LRU hits nothing.)
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from policies.base import Item
from policies.history_index import SharedPrefix

from . import identify, renderings
from .eviction import Eviction
from .store.base import Position
from .types import Message, SentBody

V = TypeVar("V")

HISTORY_PER_BODY_BYTE = 5
"""What a remembered history holds per byte of the body it came in: its parsed messages (2.6x
the bytes), chain hashes (0.6x), token-counted items (0.35x) and the body it sent upstream
(1.3x), measured with tracemalloc on `bench.bodies.scaling_body(500)` (80 kB). Counted at 2x,
the default budget held 2.5 times what it said."""


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
    answer: tuple[str, int] | None = None
    """The chain hash and count of the answer stored after these messages (`settle.answer_stored`,
    when stored with one): the next request finds it counted (`stored_counts.read`)."""
    serial: int = 0
    """Set by `HistoryCache.remember`: the conversation's place in the cache, kept by the history
    that continues this one (so the eviction sees one entry per conversation)."""


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
    serial: int = 0
    """Set by `HistoryCache.remember_body`, like `Remembered.serial`."""

    @property
    def size(self) -> int:
        """The raw bytes and, about as much again, the parsed values they keep alive."""
        return 2 * len(self.raw)


class _Index(Generic[V]):
    """Entries under one key (a first message, or a credential), with the order that chooses
    which goes when there are more than the key may hold."""

    def __init__(self) -> None:
        self.entries: dict[int, V] = {}
        self.order: Eviction[int] = Eviction()


class HistoryCache:
    def __init__(
        self,
        max_bytes: int = 256 * 1024 * 1024,
        per_key: int = 64,
        bodies_per_credential: int = 64,
        transient: renderings.Transient = renderings.DEFAULT_TRANSIENT,
    ) -> None:
        self.transient = transient
        """The configured transient-part rule every chain this cache hashes uses."""
        self.max_bytes = max_bytes
        self.per_key = per_key
        """Histories held per first message (of one tenant): several conversations may share it."""
        self.bodies_per_credential = bodies_per_credential
        self._entries: dict[tuple[str, int], _Index[Remembered]] = {}
        self._order: Eviction[tuple[tuple[str, int], int]] = Eviction()
        """Every history held, by (key, serial)."""
        self._bodies: OrderedDict[bytes, _Index[Seen]] = OrderedDict()
        """By credential digest, the least recently stored first."""
        self._bytes = 0
        self._serials = itertools.count(1)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.body_hits = 0
        """Bodies parsed only in their new tail (`tail_parse.BodyMemo.parse`); `body_misses`: whole."""
        self.body_misses = 0
        self._evicted: Callable[[str], None] | None = None
        self._gone: list[str] = []
        """Branches of the histories evicted under the lock, told to `_evicted` once it is released."""

    def on_evicted(self, callback: Callable[[str], None]) -> None:
        """Call `callback(branch_id)` when a history with a head is evicted (the budget or its key
        full; not when a longer history of it takes its place). The branch's projection memo is
        built over this history's very items and resumes only from them (`ProjectionCache`), so
        once the history is gone the memo can only be rebuilt, and it would keep the whole
        history alive until the memos' own eviction reached it (`Projector.forget`)."""
        self._evicted = callback

    @staticmethod
    def key(tenant: str, history: list[Message]) -> tuple[str, int] | None:
        """Where the candidates for `history` are kept. A hit is confirmed by comparing the
        messages themselves, so the key need only be cheap and equal for equal first messages:
        Python's hash of the first message's text (its repr when the content is not a string),
        not the chain hash, which would serialize the message, a long task prompt included,
        twice per request."""
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
            index = self._entries.get(key)
            candidates = list(index.entries.values()) if index is not None else []
        best = _longest(candidates, history, same=True) or _longest(candidates, history, same=False)
        if best is None:
            self.misses += 1
        else:
            self.hits += 1
        return best

    def hashes(self, tenant: str, history: list[Message], known: Remembered | None) -> list[str]:
        """The identity chain of `history`, hashing only what `known` does not cover."""
        if known is None or not known.hashes:
            return identify.chain(tenant, history, self.transient)
        n = len(known.hashes)
        return known.hashes + identify.chain_from(known.hashes[-1], history[n:], self.transient)

    @staticmethod
    def prefix_hash(prefix: list[Message], known: Remembered | None) -> str:
        """`identify.prefix_hash(prefix)`, the remembered one when `known` had an equal prefix
        (agents send the same system prompt every turn; hashing it again would cost on every
        request)."""
        if known is not None and known.system_hash is not None and prefix == known.prefix:
            return known.system_hash
        return identify.prefix_hash(prefix)

    def remember(self, tenant: str, entry: Remembered) -> None:
        key = self.key(tenant, entry.messages)
        if key is None:
            return
        with self._lock:
            index = self._entries.setdefault(key, _Index())
            # A longer history of the same conversation supersedes the ones it extends, and
            # takes the place of the first (a hit, for the eviction).
            continued = [s for s, e in index.entries.items() if _extends(entry, e)]
            for serial in continued[1:]:
                self._drop_history(key, index, serial)
            entry.serial = continued[0] if continued else next(self._serials)
            if continued:
                self._bytes -= index.entries[entry.serial].size
            index.entries[entry.serial] = entry
            self._bytes += entry.size
            if continued:
                index.order.hit(entry.serial)
                self._order.hit((key, entry.serial))
            else:
                index.order.touch(entry.serial)
                self._order.touch((key, entry.serial))
            while len(index.entries) > self.per_key:
                self._drop_history(key, index, index.order.evict(entry.serial), evicted=True)
            self._evict((key, entry.serial))
            if entry.head is not None and self._gone:  # the branch this request goes on to project
                self._gone = [b for b in self._gone if b != entry.head.position.branch_id]
        self._tell()

    def sizes(self) -> dict[str, int]:
        """Entries held now (`ctxproxy_cache_entries`): remembered histories and bodies."""
        with self._lock:
            return {"histories": len(self._order), "bodies": sum(len(i.entries) for i in self._bodies.values())}

    def head_for(self, tenant: str, history: list[Message], hashes: list[str]) -> Head | None:
        """The remembered head `hashes` pass through with new messages after it, found by chain
        hash among the histories remembered under `history`'s first message: for a request whose
        earlier messages differ from the remembered ones only in what identity ignores (a cache
        marker moved, a transient part dropped), so `lookup` found none. The store still appends
        there only if the lookup would have found that head (`Store.extend`)."""
        key = self.key(tenant, history)
        if key is None:
            return None
        with self._lock:
            index = self._entries.get(key)
            candidates = list(index.entries.values()) if index is not None else []
        best: Head | None = None
        for entry in candidates:
            head = entry.head
            if head is None or not 2 <= head.count < len(hashes) or hashes[head.count - 1] != head.chain_hash:
                continue
            if best is None or head.count > best.count:
                best = head
        return best

    def lookups(self) -> dict[tuple[str, ...], float]:
        """Lookups so far by (cache, outcome) (`ctxproxy_cache_lookups_total`)."""
        return {
            ("histories", "hit"): self.hits,
            ("histories", "miss"): self.misses,
            ("bodies", "hit"): self.body_hits,
            ("bodies", "miss"): self.body_misses,
        }

    def bodies(self, partition: bytes) -> list[Seen]:
        """The recent bodies sent with this credential digest."""
        with self._lock:
            index = self._bodies.get(partition)
            return list(index.entries.values()) if index is not None else []

    def remember_body(self, partition: bytes, seen: Seen, replaces: Seen | None = None) -> None:
        """Keep `seen`, in the place of `replaces`, the body it extends, when that is still held."""
        with self._lock:
            index = self._bodies.pop(partition, None) or _Index()
            self._bodies[partition] = index
            continued = replaces is not None and index.entries.get(replaces.serial) is replaces
            if replaces is not None and continued:
                seen.serial = replaces.serial
                self._bytes -= replaces.size
                index.order.hit(seen.serial)
            else:
                seen.serial = next(self._serials)
                index.order.touch(seen.serial)
            index.entries[seen.serial] = seen
            self._bytes += seen.size
            while len(index.entries) > self.bodies_per_credential:
                self._drop_body(partition, index, index.order.evict(seen.serial))
            self._evict()
        self._tell()

    def forget_body(self, partition: bytes, seen: Seen) -> None:
        with self._lock:
            index = self._bodies.get(partition)
            if index is not None and index.entries.get(seen.serial) is seen:
                index.order.discard(seen.serial)
                self._drop_body(partition, index, seen.serial)

    def _evict(self, newest: tuple[tuple[str, int], int] | None = None) -> None:
        while self._bytes > self.max_bytes:
            if self._bodies:
                partition, index = next(iter(self._bodies.items()))
                self._drop_body(partition, index, index.order.evict())
                continue
            victim = self._order.evict(newest)
            if victim is None:
                return
            key, serial = victim
            self._drop_history(key, self._entries[key], serial, tracked=False, evicted=True)

    def _tell(self) -> None:
        """Tell `_evicted` the branches whose histories went (called with the lock released)."""
        if not self._gone:
            return
        with self._lock:
            gone, self._gone = self._gone, []
        if self._evicted is not None:
            for branch_id in gone:
                self._evicted(branch_id)

    def _drop_history(
        self,
        key: tuple[str, int],
        index: _Index[Remembered],
        serial: int | None,
        tracked: bool = True,
        evicted: bool = False,
    ) -> None:
        """Drop a history from its index and the budget (and from the global order, if `tracked`);
        `evicted`: not superseded by a longer history of it, so its branch is told (`on_evicted`)."""
        if serial is None:
            return
        entry = index.entries.pop(serial)
        self._bytes -= entry.size
        if evicted and entry.head is not None and self._evicted is not None:
            self._gone.append(entry.head.position.branch_id)
        index.order.discard(serial)
        if tracked:
            self._order.discard((key, serial))
        if not index.entries:
            del self._entries[key]

    def _drop_body(self, partition: bytes, index: _Index[Seen], serial: int | None) -> None:
        if serial is not None:
            self._bytes -= index.entries.pop(serial).size
        if not index.entries:
            del self._bodies[partition]


def _longest(candidates: list[Remembered], history: list[Message], same: bool) -> Remembered | None:
    """The longest of `candidates` that `history` starts with; with `same`, only one whose last
    message is the very object in `history` (as in a body parsed only in its new tail, whose
    earlier messages are the previous request's objects). That first pass refuses the other
    conversations under the key in one identity test each, however alike they open; the second
    refuses them by their last message, then compares the whole prefix."""
    best: Remembered | None = None
    for entry in candidates:
        messages = entry.messages
        n = len(messages)
        if n > len(history) or (best is not None and n <= len(best.messages)):
            continue
        last = history[n - 1]
        if (last is messages[-1] if same else last == messages[-1]) and history[:n] == messages:
            best = entry
    return best


def _extends(longer: Remembered, shorter: Remembered) -> bool:
    n = len(shorter.hashes)
    return n <= len(longer.hashes) and (n == 0 or longer.hashes[n - 1] == shorter.hashes[-1])

"""`TokenCounter`: the per-process cache of token counts, keyed by event hash.

Problem: every request carries the whole history, and counting a 2,000-event branch with
tiktoken on each call would cost more than the projection itself. The counts of stored events
never change (an event is immutable, its chain hash names it), so they are counted once.

Invariant: a bounded LRU (`max_entries`) behind a lock: requests on several threads may share
one counter; a count is computed outside the lock (two threads may both count a new message,
both get the same number). The counting itself is the pure `policies.tokens.count_message`.

Example::

    counter = TokenCounter(encoding_for_model("gpt-4o"))
    counter.count({"role": "user", "content": "hi"}, key="sha256:...")   # 5, then cached
    counter({"role": "tool", "tool_call_id": "c1", "content": "..."})     # keyed by its JSON

Tool definitions are counted once too: an agent sends the same tools on every request, and
rendering and encoding a schema of a few thousand tokens on each would be a fixed cost per
request, so their count is cached under the digest of their JSON. Keys are only ever compared
with keys of this cache, so they are orjson's sorted JSON (`codec.dumps_sorted`), several times
cheaper than the standard library's.

The system prefix is counted through the same call on every request, two or three times, and
even its key (sorted JSON and a digest) costs something each time; `tail_parse` hands an agent's
re-sent prompt back as the very object of the previous request, so the last `RECENT_OBJECTS`
objects counted that way are answered by identity first (the object is held, so its id
cannot be reused while it is remembered).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import tiktoken

from policies.base import Message
from policies.tokens import count_message, count_text, count_tools, encoding_for_model

from . import codec

RECENT_OBJECTS = 64


def _digest(value: Any) -> str:
    return hashlib.sha256(codec.dumps_sorted(value)).hexdigest()


class TokenCounter:
    """Counts messages with one encoding and remembers the last `max_entries` counts.

    `count(message, key)` uses the caller's key (an event hash); calling the counter itself
    (`counter(message)`, the `count` callable `project()` expects) keys by the message's JSON.
    Thread-safe; the cache never grows past `max_entries`.
    """

    def __init__(self, encoding: tiktoken.Encoding, max_entries: int = 50_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.encoding = encoding
        self.max_entries = max_entries
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        self._recent: OrderedDict[int, tuple[Message, int]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @classmethod
    def for_model(cls, model: str, max_entries: int = 50_000) -> TokenCounter:
        return cls(encoding_for_model(model), max_entries)

    def count(self, message: Message, key: str | None = None) -> int:
        cache_key = key if key is not None else _digest(message)
        cached = self._cached(cache_key)
        if cached is not None:
            return cached
        tokens = count_message(message, self.encoding)
        self._remember(cache_key, tokens)
        return tokens

    def _cached(self, cache_key: str) -> int | None:
        with self._lock:
            cached = self._cache.get(cache_key)
            if cached is not None:
                self._cache.move_to_end(cache_key)
                self.hits += 1
            return cached

    def _remember(self, cache_key: str, tokens: int) -> None:
        with self._lock:
            self.misses += 1
            self._cache[cache_key] = tokens
            self._cache.move_to_end(cache_key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    def holds(self, key: str) -> bool:
        """Whether the count under `key` is held (neither a hit nor a miss)."""
        return key in self._cache

    def __call__(self, message: Message) -> int:
        with self._lock:
            recent = self._recent.get(id(message))
        if recent is not None and recent[0] is message:
            return recent[1]
        tokens = self.count(message)
        with self._lock:
            self._recent[id(message)] = (message, tokens)
            if len(self._recent) > RECENT_OBJECTS:
                self._recent.popitem(last=False)
        return tokens

    def count_text(self, text: str) -> int:
        return count_text(text, self.encoding)

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None, tool_choice: Any = None) -> int:
        """The request's tool definitions, by their API's rendering (`policies.tokens.count_tools`)."""
        if not tools:
            return 0
        cache_key = "tools:" + _digest([tools, tool_choice])
        cached = self._cached(cache_key)
        if cached is not None:
            return cached
        tokens = count_tools(tools, self.encoding, tool_choice)
        self._remember(cache_key, tokens)
        return tokens

    def __len__(self) -> int:
        return len(self._cache)

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
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import tiktoken

from policies.base import Message
from policies.tokens import count_message, count_text, count_tools, encoding_for_model, message_key


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
        self.hits = 0
        self.misses = 0

    @classmethod
    def for_model(cls, model: str, max_entries: int = 50_000) -> TokenCounter:
        return cls(encoding_for_model(model), max_entries)

    def count(self, message: Message, key: str | None = None) -> int:
        cache_key = key if key is not None else message_key(message)
        with self._lock:
            cached = self._cache.get(cache_key)
            if cached is not None:
                self._cache.move_to_end(cache_key)
                self.hits += 1
                return cached
        tokens = count_message(message, self.encoding)
        with self._lock:
            self.misses += 1
            self._cache[cache_key] = tokens
            self._cache.move_to_end(cache_key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return tokens

    def __call__(self, message: Message) -> int:
        return self.count(message)

    def count_text(self, text: str) -> int:
        return count_text(text, self.encoding)

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None, tool_choice: Any = None) -> int:
        """The request's tool definitions, by their API's rendering (`policies.tokens.count_tools`)."""
        return count_tools(tools, self.encoding, tool_choice)

    def __len__(self) -> int:
        return len(self._cache)

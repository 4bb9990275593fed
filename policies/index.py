"""One pass over a branch's items, reusable by the next call: groups, users, tokens, pins.

Problem: `project()` is called on every request with the whole branch history, and most of it is
the same as on the previous request (same `Item` objects when the caller reuses them, as the
proxy's history cache does). Grouping, finding the newest user message, summing tokens and
matching pin rules over 2,000 items on every call made the projection cost grow with history.

`index_items(items, previous)` computes a `HistoryIndex`; given the index of an earlier call it
only re-reads what follows that call's *stable point*: the last non-tool item, i.e. the start
of the last run (everything before it is grouped for good; a run of tool results may still grow).
The earlier index is reused only when `items[:stable]` are the very same `Item` objects
(identity, checked in C: one pointer comparison per item), so a reused index is exactly what a
fresh pass would compute — it never depends on equality, which would let `1` and `1.0` or a
different key order slip through.

`ProjectionCache` is the caller-owned memo `project(..., cache=)` takes: the last index and the
trimmed forms of tool results (keyed by the message object). Results never depend on whether a
cache is passed, how warm it is or what else it saw; it only saves work. It assumes what every
caller of `project` already promises: items and their messages are not mutated after the call.

Invariant: groups' first seqs are strictly increasing (items are ascending by seq), which makes
"covered groups" a prefix of the group list and every lookup by seq a bisection.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count as _counter
from operator import is_not
from typing import TYPE_CHECKING, Any

from policies.base import Item, PinsConfig
from policies.groups import Group, extend_groups, group_index_of
from policies.pins import matches_rules

if TYPE_CHECKING:
    from policies.incremental import TailState

_SERIALS = _counter(1)


@dataclass(frozen=True)
class HistoryIndex:
    items: Sequence[Item]
    groups: list[Group]
    firsts: list[int]
    """first seq of each group, strictly increasing"""
    user_seqs: list[int]
    """seqs of the user messages, ascending"""
    total_tokens: int
    stable: int
    """items[:stable] end with a finished group; the next call may resume grouping there"""
    stable_groups: int
    stable_users: int
    stable_tokens: int
    stable_items: Sequence[Item]
    rule_pins: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[int, frozenset[int]]] = field(default_factory=dict)
    """(roles, patterns) -> (upto, seqs pinned by those rules among items[:upto]), upto <= stable"""
    orphan_seqs: list[int] = field(default_factory=list)
    """seqs of the orphan results (each an `orphan` group of its own), ascending"""
    stable_orphans: int = 0
    serial: int = 0
    """unique per index (process-wide)"""
    base: int = -1
    """`serial` of the index this one resumed from (-1: computed from scratch); then
    `groups[:base_index.stable_groups]` are that index's very `Group` objects"""

    @property
    def first_user(self) -> int | None:
        return self.user_seqs[0] if self.user_seqs else None

    @property
    def last_user(self) -> int | None:
        return self.user_seqs[-1] if self.user_seqs else None

    def pinned(self, config: PinsConfig) -> frozenset[int]:
        """`pins.pinned_seqs(items, config)`, reusing rule matches over the stable part."""
        first = self.first_user if config.first_user else None
        base = frozenset(()) if first is None else frozenset((first,))
        if not config.roles and not config.patterns:
            return base
        key = (config.roles, config.patterns)
        upto, seqs = self.rule_pins.get(key, (0, frozenset()))
        roles = set(config.roles)
        compiled = [re.compile(pattern) for pattern in config.patterns]
        if upto < self.stable:
            seqs = seqs | rule_matches(self.items[upto : self.stable], roles, compiled)
            upto = self.stable
            self.rule_pins[key] = (upto, seqs)
        return base | seqs | rule_matches(self.items[upto:], roles, compiled)

    def group_of(self, seq: int) -> int:
        """Index of the group holding item `seq` (-1 if none)."""
        return group_index_of(self.groups, seq, self.firsts)

    def first_uncovered(self, boundary: int) -> int:
        """Index of the first group starting after `boundary` (groups before it are covered when
        `boundary` is a normalized boundary, see `groups.normalize_boundary`)."""
        return bisect_right(self.firsts, boundary)

    def item_of(self, seq: int) -> Item | None:
        items = self.items
        if items:
            position = seq - items[0].seq
            if 0 <= position < len(items) and items[position].seq == seq:
                return items[position]  # contiguous seqs, the usual case
        index = self.group_of(seq)
        if index < 0:
            return None
        return next((item for item in self.groups[index].items if item.seq == seq), None)

    def tokens_of(self, seqs: frozenset[int]) -> int:
        """Sum of `item.tokens` over the items with these seqs."""
        total = 0
        for seq in seqs:
            item = self.item_of(seq)
            if item is not None:
                total += item.tokens
        return total


def rule_matches(items: Sequence[Item], roles: set[str], compiled: list[re.Pattern[str]]) -> frozenset[int]:
    """Seqs of `items` pinned by role or pattern (see `pins`)."""
    return frozenset(item.seq for item in items if matches_rules(item.message, roles, compiled))


def _reusable(items: Sequence[Item], previous: HistoryIndex | None) -> bool:
    if previous is None or previous.stable == 0 or previous.stable >= len(items):
        return False
    if items[previous.stable].message.get("role") == "tool":
        return False  # a result would continue the run before it: regroup from scratch
    # map() stops at the shorter iterable: items[:stable] vs the previous ones, by identity
    return not any(map(is_not, items, previous.stable_items))


def index_items(items: Sequence[Item], previous: HistoryIndex | None = None) -> HistoryIndex:
    """The index of `items`, reusing `previous` (an earlier call's) when it still applies."""
    return _index_from(items, previous if previous is not None and _reusable(items, previous) else None)


def _index_from(items: Sequence[Item], previous: HistoryIndex | None) -> HistoryIndex:
    """The index of `items`, resuming from `previous` (already checked to be reusable)."""
    if previous is not None:
        start = previous.stable
        groups = previous.groups[: previous.stable_groups]
        firsts = previous.firsts[: previous.stable_groups]
        user_seqs = previous.user_seqs[: previous.stable_users]
        tokens = previous.stable_tokens
        rule_pins = dict(previous.rule_pins)
        orphan_seqs = previous.orphan_seqs[: previous.stable_orphans]
    else:
        start, groups, firsts, user_seqs, tokens, rule_pins = 0, [], [], [], 0, {}
        orphan_seqs = []
    known = len(groups)
    extend_groups(groups, items, start)
    last_first = firsts[-1] if firsts else None
    for group in groups[known:]:
        first = group.items[0].seq
        if last_first is not None and first <= last_first:
            raise ValueError(f"item seqs must be ascending and unique (e{first} after e{last_first})")
        last_first = first
        firsts.append(first)
        if group.kind == "user":
            user_seqs.append(first)
        elif group.kind == "orphan":
            orphan_seqs.append(first)
    # the stable point: the last non-tool item (a trailing run of results may still grow)
    stable = start
    tail_tokens = 0
    for position in range(len(items) - 1, start - 1, -1):
        item = items[position]
        tail_tokens += item.tokens
        if item.message.get("role") != "tool":
            stable = position
            break
    stable_tokens = tokens + sum(item.tokens for item in items[start:stable])
    if stable < len(items):
        stable_seq = items[stable].seq
        stable_groups = bisect_left(firsts, stable_seq)
        stable_users = bisect_left(user_seqs, stable_seq)
        stable_orphans = bisect_left(orphan_seqs, stable_seq)
    else:
        stable_groups, stable_users, stable_orphans = len(groups), len(user_seqs), len(orphan_seqs)
    return HistoryIndex(
        items=items,
        groups=groups,
        firsts=firsts,
        user_seqs=user_seqs,
        total_tokens=stable_tokens + tail_tokens,
        stable=stable,
        stable_groups=stable_groups,
        stable_users=stable_users,
        stable_tokens=stable_tokens,
        stable_items=items[:stable] if isinstance(items, list | tuple) else list(items[:stable]),
        rule_pins=rule_pins,
        orphan_seqs=orphan_seqs,
        stable_orphans=stable_orphans,
        serial=next(_SERIALS),
        base=previous.serial if previous is not None else -1,
    )


class ProjectionCache:
    """Caller-owned memo for `project(..., cache=)` across calls on one growing branch.

    Holds the last `HistoryIndex`, the last call's rendered tail (`tail`, see
    `policies.incremental`; changed only under `lock`) and a bounded memo (`max_entries`,
    cleared when full) of what was derived from immutable inputs: slots of groups, trimmed tool
    results, trimmed slots, summary blocks. Every entry holds the objects it was derived from and is used only when they
    are the same objects again (and the same `count`), so results never depend on the cache;
    it only saves work. Safe to share and to use from several threads (the index is swapped in
    one assignment; the memo is a plain dict). Keep one per branch (e.g. an LRU keyed by branch
    id): a cache alternating between two histories just re-indexes each time.
    """

    def __init__(self, max_entries: int = 16384) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._index: HistoryIndex | None = None
        self.reused = 0
        self.rebuilt = 0
        self.incremental = 0
        """calls answered from `tail` (the previous call's rendering) plus what was new"""
        self.rendered = 0
        """slots (groups) the incremental path rendered; the rest of its tails were reused"""
        self.tail: TailState | None = None
        """the previous projection's rendered tail (`policies.incremental`), guarded by `lock`"""
        self.lock = threading.Lock()

    def index(self, items: Sequence[Item]) -> HistoryIndex:
        """`index_items(items)`, resuming from the previous call's index when it applies."""
        previous = self._index
        if previous is not None and _reusable(items, previous):
            self.reused += 1
            index = _index_from(items, previous)
        else:
            self.rebuilt += 1
            index = _index_from(items, None)
        self._index = index
        return index

    def get(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self.memo.get(key)

    def put(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        memo = self.memo
        if len(memo) >= self.max_entries:
            self.memo = memo = {}
        memo[key] = value

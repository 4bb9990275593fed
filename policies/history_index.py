"""One pass over a branch's items, resumable by the next call: groups, users, tokens, pins.

Problem: `project()` is called on every request with the whole branch history, and most of it is
the same as on the previous request (same `Item` objects when the caller reuses them, as the
proxy's history cache does). Grouping, finding the newest user message, summing tokens and
matching pin rules over 2,000 items on every call made the projection cost grow with history.

`index_items(items, previous)` computes a `HistoryIndex`; given the index of an earlier call it
only re-reads what follows that call's *stable point*: the last non-tool item, i.e. the start
of the last run (everything before it is grouped for good; a run of tool results may still grow).
The earlier index is reused only when `items[:stable]` are the very same `Item` objects, so a
reused index is exactly what a fresh pass would compute — it never depends on equality, which
would let `1` and `1.0` or a different key order slip through. Identity is proved one of two
ways:
- by the caller, in O(1): a `SharedPrefix(base, length)` says `items[:length]` are the very
  objects of `base[:length]` (the caller built `items` as `base[:length] + new`, as the proxy's
  `Projector.items` does from the history cache's list); it applies when `base` is the list the
  earlier index was computed over and `length` reaches that index's stable point;
- else by walking `items[:stable]` against the earlier index's `items` (one pointer comparison
  per item, in C), which that index holds, not a copy of it: like every caller of `project`, the
  caller does not mutate a list of items once it was indexed (appending is harmless: only the
  first `stable` are compared).

Example: request 7 of a branch indexes `a` (2,001 items, stable point 2,000); request 8 sends
`b = a[:2001] + [reply, question]` with `SharedPrefix(a, 2001)`: `index_items(b, index_a, proof)`
checks `proof.base is index_a.items`, groups the 3 items from position 2,000 on, and copies
(in C) the lists of the 2,000 items' groups, seqs and users it shares — or, when the caller gives
`index_a` up (`take=True`, as the per-branch `ProjectionCache` does with its own last index),
cuts those lists back to the stable point and extends them in place: no work for what is shared.

Resuming is a pure function of (items, previous index); keeping the previous index between
calls is the caller's business (e.g. a per-branch cache).

Invariant: groups' first seqs are strictly increasing (items are ascending by seq), which makes
"covered groups" a prefix of the group list and every lookup by seq a bisection.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import is_not

from policies.base import Item, Message
from policies.config import PinsConfig
from policies.groups import Group, extend_groups, group_index_of
from policies.pins import matches_rules, pinned_roles


def _token() -> object:
    return object()


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
    rule_pins: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[int, frozenset[int]]] = field(default_factory=dict)
    """(roles, patterns) -> (upto, seqs pinned by those rules among items[:upto]), upto <= stable"""
    orphan_seqs: list[int] = field(default_factory=list)
    """seqs of the orphan results (each an `orphan` group of its own), ascending"""
    stable_orphans: int = 0
    serial: object = field(default_factory=_token)
    """this index's identity token (an object compared with `is`; no counter, no global state)"""
    base: object | None = None
    """`serial` of the index this one resumed from (None: computed from scratch); then
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
        key = (pinned_roles(config), config.patterns)
        upto, seqs = self.rule_pins.get(key, (0, frozenset()))
        roles = set(key[0])
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

    def message_of(self, seq: int) -> Message | None:
        """The message of item `seq` (None if none)."""
        item = self.item_of(seq)
        return item.message if item is not None else None

    def tokens_of_one(self, seq: int) -> int:
        """`item.tokens` of the item `seq` (0 if none)."""
        item = self.item_of(seq)
        return item.tokens if item is not None else 0

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


@dataclass(frozen=True)
class SharedPrefix:
    """The caller's word that `items[:length]` are the very `Item` objects of `base[:length]`
    (it built `items` from them), which lets `index_items` resume from an index of `base`
    without comparing the shared items. A false claim is a broken promise, as mutating indexed
    items would be: the index would describe other items."""

    base: Sequence[Item]
    length: int


def resumable(items: Sequence[Item], previous: HistoryIndex | None, shared: SharedPrefix | None = None) -> bool:
    """Whether `index_items(items, previous)` may resume from `previous` (else it starts over)."""
    if previous is None or previous.stable == 0 or previous.stable >= len(items):
        return False
    if items[previous.stable].message.get("role") == "tool":
        return False  # a result would continue the run before it: regroup from scratch
    if shared is not None and shared.base is previous.items and shared.length >= previous.stable:
        return True
    # map() stops at the shorter iterable: items[:stable] vs the previous ones, by identity
    return not any(map(is_not, items, islice(previous.items, previous.stable)))


def index_items(
    items: Sequence[Item],
    previous: HistoryIndex | None = None,
    shared: SharedPrefix | None = None,
    *,
    take: bool = False,
) -> HistoryIndex:
    """The index of `items`, reusing `previous` (an earlier call's) when it still applies;
    `shared` may prove that it does without a walk over the shared items (see `SharedPrefix`).

    `take`: the caller gives `previous` up. A resumed index then takes over its lists (cut back
    to the stable point and extended in place) instead of copying the shared part of each;
    `previous` must not be used afterwards, even when this raises (its lists may be cut). Without
    it, `previous` is left as it was."""
    return _index_from(items, previous if resumable(items, previous, shared) else None, take)


def _index_from(items: Sequence[Item], previous: HistoryIndex | None, take: bool = False) -> HistoryIndex:
    """The index of `items`, resuming from `previous` (already checked to be reusable)."""
    if previous is not None and take:
        start = previous.stable
        groups, firsts, user_seqs = previous.groups, previous.firsts, previous.user_seqs
        orphan_seqs = previous.orphan_seqs
        del groups[previous.stable_groups :], firsts[previous.stable_groups :]
        del user_seqs[previous.stable_users :], orphan_seqs[previous.stable_orphans :]
        tokens = previous.stable_tokens
        rule_pins = previous.rule_pins
    elif previous is not None:
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
        rule_pins=rule_pins,
        orphan_seqs=orphan_seqs,
        stable_orphans=stable_orphans,
        base=previous.serial if previous is not None else None,
    )

"""`ProjectionCache`: what one branch's projections remember between calls.

Problem: the proxy projects a branch on every request, and most of what the previous request
derived (the history index, group renderings, trimmed tool results, the summary block) is
derived again from the very same objects. The cache remembers those derivations; the core
(`policies.projection`) never knows: it only sees a resumed `HistoryIndex` and a `Renderer`.

Invariant: every entry holds the objects it was derived from and is used only when they are
the same objects again (identity, and the same `count`), so results never depend on whether a
cache is passed, how warm it is or what else it saw. It assumes what every caller of `project`
already promises: items and their messages are not mutated after the call.

Not thread-safe, and holds no lock: the owner serializes calls on one cache (the proxy's
`Projector` keeps one per branch, each behind its own lock).

Example::

    cache = ProjectionCache()
    project_cached(cache, Inputs(prefix, items, None, budget, config, counter))          # builds
    project_cached(cache, Inputs(prefix, [*items, new], None, budget, config, counter))  # resumes
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from policies.base import Item, Message
from policies.draft import CountFn, Renderer, ShapeSlot, Slot, StepContext, render_slot
from policies.groups import Group
from policies.history_index import HistoryIndex, SharedPrefix, index_items
from policies.memo.tail import TailState
from policies.outcome import TrimEntry
from policies.trim_result import Shaping, Trimmed
from policies.trim_tool_results import shape_one


class ProjectionCache:
    """Caller-owned memo for `project_cached` across calls on one growing branch.

    Holds the last `HistoryIndex`, the last call's rendered tail (`tail`, see
    `policies.memo.incremental`) and a bounded memo (`max_entries`, cleared when full) of what
    was derived from immutable inputs: slots of groups, trimmed tool results, trimmed slots,
    summary blocks. Keep one per branch (e.g. an LRU keyed by branch id): a cache alternating
    between two histories just re-indexes each time."""

    def __init__(self, max_entries: int = 16384) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.memo: dict[Hashable, Any] = {}
        self.last_index: HistoryIndex | None = None
        self.reused = 0
        self.rebuilt = 0
        self.incremental = 0
        """calls answered from `tail` (the previous call's rendering) plus what was new"""
        self.rendered = 0
        """slots (groups) the incremental path rendered; the rest of its tails were reused"""
        self.tail: TailState | None = None
        """the previous projection's rendered tail (`policies.memo.incremental`)"""

    @property
    def renderer(self) -> MemoRenderer:
        """A renderer consulting this cache, new on each access: a cache holding its own renderer
        (which holds the cache) would be a reference cycle, and an evicted branch's cache (its
        index, groups and slots) would then wait for a full collection instead of being freed at
        once by its reference counts."""
        return MemoRenderer(self)

    def index(self, items: Sequence[Item], shared: SharedPrefix | None = None) -> HistoryIndex:
        """`index_items(items)`, resuming from the previous call's index when it applies
        (`shared`: the caller's proof of what `items` share with an earlier list, see
        `policies.history_index.SharedPrefix`).

        The index is the cache's own, valid until the next call: that call gives it up to
        `index_items(..., take=True)`, which extends its lists in place when it resumes."""
        previous, self.last_index = self.last_index, None  # given up, even if indexing raises
        index = index_items(items, previous, shared, take=True)
        if index.base is not None:
            self.reused += 1
        else:
            self.rebuilt += 1
            # Rebuilt: its groups are new objects, so no slot entry can match again, and each
            # holds a whole earlier history alive (a branch re-indexed on every request, as
            # when the proxy's history cache is smaller than the conversations in use, kept up
            # to `max_entries` / groups copies of its history: 4.6 GB for 1,024 branches).
            self.memo = {}
        self.last_index = index
        return index

    def get(self, key: Hashable) -> Any:
        return self.memo.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        memo = self.memo
        if len(memo) >= self.max_entries:
            self.memo = memo = {}
        memo[key] = value


class MemoRenderer(Renderer):
    """A `Renderer` that returns the same objects as last time for the same inputs."""

    def __init__(self, cache: ProjectionCache) -> None:
        self.cache = cache

    def slot(self, index: int, group: Group, is_last: bool, keep: bool, protected: bool, count: CountFn) -> Slot:
        # Keyed by the group's id alone (the other entries' keys are tuples) and held as the
        # slot itself, which records the group and flags it was made from: a branch keeps an
        # entry per group, so each costs a pointer, not three tuples. Only a group with missing
        # results depends on `is_last` and `count` (its repairs), and keeps them beside its slot.
        cache = self.cache
        key = id(group)
        memo = cache.get(key)
        if memo is not None:
            slot: Slot = memo if type(memo) is Slot else memo[0]
            if (
                slot.group is group
                and slot.index == index
                and slot.keep == keep
                and slot.protected == protected
                and (memo is slot or (memo[1] == is_last and memo[2] is count))
            ):
                return slot
        slot = render_slot(index, group, is_last, keep, protected, count)
        cache.put(key, (slot, is_last, count) if group.missing_ids else slot)
        return slot

    def summary(
        self,
        text: str,
        covered: int,
        count: CountFn,
        recall_tool: str | None = None,
        native: tuple[Message, ...] = (),
    ) -> tuple[tuple[Message, ...], int]:
        cache = self.cache
        key = ("summary", covered, recall_tool)
        memo = cache.get(key)
        if memo is not None and memo[0] == text and memo[1] is count and memo[4] == native:
            return memo[2], memo[3]
        block, tokens = super().summary(text, covered, count, recall_tool, native)
        cache.put(key, (text, count, block, tokens, native))
        return block, tokens

    def trimmed_slot(
        self, slot: Slot, old: bool, later: Sequence[Group], ctx: StepContext, shape: ShapeSlot
    ) -> tuple[Slot, Sequence[TrimEntry]]:
        # the same slot object trimmed the same way, reading the same later groups (compared by
        # identity first, then by value: equal groups render alike): reuse the result (and its objects)
        cache = self.cache
        pinned_here = ctx.pinned.intersection(slot.seqs)
        key = ("slot_trim", id(slot), old)
        settings = (ctx.config.tool_results, pinned_here, ctx.recall_tool)
        memo = cache.get(key)
        if (
            memo is not None
            and memo[0] is slot
            and memo[1] is ctx.count
            and memo[2] == settings
            and (memo[3] is later or memo[3] == later)
        ):
            return memo[4], memo[5]
        new_slot, entries = shape(slot, old, later, ctx, self.shape_one)
        cache.put(key, (slot, ctx.count, settings, later, new_slot, tuple(entries)))
        return new_slot, entries

    def shape_one(self, message: Message, spec: Shaping, count: CountFn) -> tuple[Trimmed | None, int]:
        """`trim_tool_results.shape_one`, once per message object and `Shaping` (everything else
        its bytes depend on) and `count`."""
        cache = self.cache
        key = ("shape", id(message), spec)
        memo = cache.get(key)
        if memo is None or memo[0] is not message or memo[1] is not count:
            memo = (message, count, *shape_one(message, spec, count))
            cache.put(key, memo)
        return memo[2], memo[3]

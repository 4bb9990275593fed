"""The cached fast path of `project()`: a request that adds a turn costs what the turn adds.

Problem: before the first compaction (history under the trigger) every group of the branch is
sent, so `build_draft`, trimming, `Draft.messages` and `make_record` each walked the whole
history on every request — 2,000 events cost ~30x what 50 did, though the previous request had
already rendered all but the newest turn exactly the same way.

`ProjectionCache.tail` (a `TailState`) keeps the previous call's rendered uncovered groups
("the tail", before pruning): per slot the messages sent (trimmed, repaired), their seqs, trim
entries, repairs, and running token totals, all as flat lists with per-slot end offsets so the
state can be cut after any slot in O(1) (`del` of what follows) and extended by new slots.

`project_incremental` reuses the state up to the first slot whose rendering may differ and
renders the rest. The reused slots are exactly what a fresh render would produce because:
- their groups are the very objects of the previous call: the `HistoryIndex` resumed from the
  index the state was built with (`index.base == state.serial`), so
  `groups[:state.stable_groups]` are shared, and the previous last group (whose `is_last`,
  protection and repairs change) is `groups[state.stable_groups]`, re-rendered;
- the covered boundary, `PolicyConfig` and `count` are the same (else: rebuilt from scratch);
- trimming of a slot depends on its side of the trim boundary: when the (quantized) boundary
  moves, slots from the lower of the two boundaries on are re-rendered;
- pins of the shared items cannot change (rules read the item only; the first user message
  is shared), and the only other flags that change — `keep`/`protected` of the previous newest
  user message's group — do not change what a `user` group renders to (it is never trimmed);
  flags only matter to `prune_groups`, which this path never runs.

The result is returned only when no step would change it: `summary_tail` sees a total at or
below the trigger (no plan) and `prune_groups` sees one within the input budget. Otherwise
`project()` runs the full pipeline (the state is still updated: it is valid for the next call).
The head (covered groups kept: pinned, newest user message) and the summary block are small and
recomputed each time. Output equals the full pipeline's byte for byte (property-tested in
`tests/policies/test_incremental.py`).

Cost: O(new groups + re-rendered groups + head) Python work, plus C-level copies of the outgoing
message list and seq tuple, and the index's identity check of the shared items.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from policies.base import (
    Budget,
    Checkpoint,
    Item,
    Message,
    PolicyConfig,
    Projection,
    ProjectionRecord,
    TrimEntry,
)
from policies.draft import CountFn, Slot, StepContext, cached_slot
from policies.groups import effective_boundary, last_index
from policies.index import HistoryIndex, ProjectionCache
from policies.summary_prompt import summary_block
from policies.text import clone
from policies.trim_tool_results import _trim_slots, trim_boundary

_START = itemgetter(0)
NO_TRIM = -1
"""`TailState.boundary` when the order has no `trim_tool_results` step"""


@dataclass(eq=False)
class TailState:
    """The rendered uncovered groups of the previous projection of one branch (pre-pruning).

    Mutable, owned by a `ProjectionCache` and changed only under its `lock`. Lists ending in
    `_ends` hold running offsets per slot, starting with 0: slot i's messages are
    `body[msg_ends[i]:msg_ends[i + 1]]`, and so on."""

    serial: int = -1
    """`HistoryIndex.serial` of the index the state was built with"""
    stable_groups: int = 0
    """that index's `stable_groups`: later indexes share the groups before it"""
    covered: int = 0
    config: PolicyConfig | None = None
    count: CountFn | None = None
    boundary: int = NO_TRIM
    slot_groups: list[int] = field(default_factory=list)
    """group index of each slot (orphans have no slot), ascending"""
    body: list[Message] = field(default_factory=list)
    """the slots' messages as sent (after trimming; non-dict mappings copied into dicts)"""
    msg_ends: list[int] = field(default_factory=lambda: [0])
    sent: list[int] = field(default_factory=list)
    """seqs sent (repairs have none), ascending"""
    seq_ends: list[int] = field(default_factory=lambda: [0])
    entries: list[TrimEntry] = field(default_factory=list)
    entry_ends: list[int] = field(default_factory=lambda: [0])
    repaired: list[tuple[int, str]] = field(default_factory=list)
    repair_ends: list[int] = field(default_factory=lambda: [0])
    raw_ends: list[int] = field(default_factory=lambda: [0])
    """running tokens before trimming"""
    tok_ends: list[int] = field(default_factory=lambda: [0])
    """running tokens as sent"""
    ranges: list[tuple[int, int]] = field(default_factory=list)
    """`sent` as inclusive ranges"""

    def truncate(self, slots: int) -> None:
        """Forget every slot from position `slots` on."""
        del self.slot_groups[slots:]
        del self.body[self.msg_ends[slots] :]
        del self.sent[self.seq_ends[slots] :]
        del self.entries[self.entry_ends[slots] :]
        del self.repaired[self.repair_ends[slots] :]
        for ends in (self.msg_ends, self.seq_ends, self.entry_ends, self.repair_ends):
            del ends[slots + 1 :]
        del self.raw_ends[slots + 1 :]
        del self.tok_ends[slots + 1 :]
        ranges = self.ranges
        if not self.sent:
            ranges.clear()
            return
        last = self.sent[-1]
        position = bisect_right(ranges, last, key=_START) - 1  # the range holding `last`
        del ranges[position + 1 :]
        if ranges[position][1] != last:
            ranges[position] = (ranges[position][0], last)

    def append(self, group_index: int, raw_total: int, slot: Slot, entries: Sequence[TrimEntry]) -> None:
        """Add one rendered slot (`slot` as sent, `raw_total` its tokens before trimming)."""
        self.slot_groups.append(group_index)
        messages = slot.messages
        if any(type(message) is not dict for message in messages):
            messages = tuple(message if type(message) is dict else clone(message) for message in messages)
        self.body.extend(messages)
        self.msg_ends.append(len(self.body))
        ranges = self.ranges
        first_seq = slot.group.first_seq
        for seq, message in zip(slot.seqs, slot.messages, strict=True):
            if seq is None:
                self.repaired.append((first_seq, str(message.get("tool_call_id"))))
                continue
            self.sent.append(seq)
            if ranges and ranges[-1][1] == seq - 1:
                ranges[-1] = (ranges[-1][0], seq)
            else:
                ranges.append((seq, seq))
        self.seq_ends.append(len(self.sent))
        self.repair_ends.append(len(self.repaired))
        self.entries.extend(entries)
        self.entry_ends.append(len(self.entries))
        self.raw_ends.append(self.raw_ends[-1] + raw_total)
        self.tok_ends.append(self.tok_ends[-1] + slot.total)


def summary_for(
    text: str, covered: int, count: CountFn, cache: ProjectionCache | None
) -> tuple[tuple[Message, ...], int]:
    """The summary block and its tokens (remembered per checkpoint text and boundary)."""
    key = ("summary", covered)
    memo = cache.get(key) if cache is not None else None
    if memo is not None and memo[0] == text and memo[1] is count:
        return memo[2], memo[3]
    block = (summary_block(text, covered),)
    tokens = sum(count(message) for message in block)
    if cache is not None:
        cache.put(key, (text, count, block, tokens))
    return block, tokens


def seq_ranges(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending unique seqs as inclusive ranges: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out and out[-1][1] == seq - 1:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out


def project_incremental(
    prefix: Sequence[Message],
    items: Sequence[Item],
    index: HistoryIndex,
    checkpoint: Checkpoint | None,
    budget: Budget,
    config: PolicyConfig,
    count: CountFn,
    cache: ProjectionCache,
) -> Projection | None:
    """`project()`'s result from the cached tail, or None when a step would change the draft
    (then the caller runs the full pipeline). `index` is `cache.index(items)` of this call."""
    groups = index.groups
    pinned = index.pinned(config.pins)
    latest_user = index.last_user
    covered = effective_boundary(groups, checkpoint)
    last = last_index(groups)
    latest_group = index.group_of(latest_user) if latest_user is not None else -1
    keep_groups = {index.group_of(seq) for seq in pinned}
    keep_groups.add(latest_group)
    keep_groups.add(last)
    first_uncovered = index.first_uncovered(covered)
    trimming = "trim_tool_results" in config.order
    boundary = trim_boundary(len(groups), config.tool_results) if trimming else NO_TRIM
    ctx = StepContext(
        items=items,
        groups=groups,
        checkpoint=checkpoint,
        budget=budget,
        config=config,
        count=count,
        pinned=pinned,
        latest_user=latest_user,
        covered_through=covered,
        index=index,
        cache=cache,
    )
    head = tuple(
        cached_slot(cache, i, groups[i], i == last, True, i == last or i == latest_group, count)
        for i in sorted(keep_groups)
        if 0 <= i < first_uncovered and groups[i].kind != "orphan"
    )
    if trimming:
        sent_head, head_entries = _trim_slots(head, boundary, ctx)
    else:
        sent_head, head_entries = head, []

    with cache.lock:
        state = cache.tail
        if (
            state is None
            or state.serial != index.base
            or state.covered != covered
            or not (state.count is count or state.count == count)
            or not (state.config is config or state.config == config)
        ):
            state = TailState(covered=covered, config=config, count=count, boundary=boundary)
            keep, start = 0, first_uncovered
        else:
            resume = state.stable_groups
            if boundary != state.boundary and max(boundary, state.boundary) > first_uncovered:
                resume = min(resume, boundary, state.boundary)
            keep = bisect_left(state.slot_groups, resume)
            start = max(resume, first_uncovered)
        rendered: list[tuple[int, int, Slot, Sequence[TrimEntry]]] = []
        for i in range(start, len(groups)):
            group = groups[i]
            if group.kind == "orphan":
                continue
            slot = cached_slot(cache, i, group, i == last, i in keep_groups, i == last or i == latest_group, count)
            raw_total = slot.total
            entries: Sequence[TrimEntry] = ()
            if trimming:
                (slot,), entries = _trim_slots((slot,), boundary, ctx)
            rendered.append((i, raw_total, slot, entries))
        # nothing below raises: the state always describes a whole call
        cache.rendered += len(rendered)
        state.truncate(keep)
        for i, raw_total, slot, entries in rendered:
            state.append(i, raw_total, slot, entries)
        state.serial = index.serial
        state.stable_groups = index.stable_groups
        state.boundary = boundary
        cache.tail = state

        prefix_tokens = sum(count(message) for message in prefix)
        summary: tuple[Message, ...] = ()
        summary_tokens = 0
        if checkpoint is not None and covered > 0:
            summary, summary_tokens = summary_for(checkpoint.summary, covered, count, cache)
        base = budget.fixed_tokens + prefix_tokens + summary_tokens
        raw_total = base + sum(slot.total for slot in head) + state.raw_ends[-1]
        total = base + sum(slot.total for slot in sent_head) + state.tok_ends[-1]
        trigger = ctx.trigger_tokens
        at = raw_total
        for name in config.order:
            if name == "trim_tool_results":
                at = total
            elif name == "summary_tail" and at > trigger:
                return None  # a compaction to plan
            elif name == "prune_groups" and at > budget.input_budget:
                return None  # groups to drop

        messages: list[Any] = list(prefix)
        head_seqs: list[int] = []
        repaired: list[tuple[int, str]] = []
        for slot in sent_head:
            messages.extend(slot.messages)
            for seq, message in zip(slot.seqs, slot.messages, strict=True):
                if seq is None:
                    repaired.append((slot.group.first_seq, str(message.get("tool_call_id"))))
                else:
                    head_seqs.append(seq)
        messages.extend(summary)
        if any(type(message) is not dict for message in messages):
            messages = [message if type(message) is dict else clone(message) for message in messages]
        messages += state.body
        sent_seqs = (*head_seqs, *state.sent)
        ranges = seq_ranges(head_seqs)
        tail_ranges = state.ranges
        if ranges and tail_ranges and ranges[-1][1] == tail_ranges[0][0] - 1:
            ranges[-1] = (ranges[-1][0], tail_ranges[0][1])
            ranges.extend(tail_ranges[1:])
        else:
            ranges.extend(tail_ranges)
        orphans = index.orphan_seqs
        record = ProjectionRecord(
            client_tokens=budget.fixed_tokens + prefix_tokens + index.total_tokens,
            sent_tokens=total,
            checkpoint_generation=checkpoint.generation if checkpoint and covered else None,
            covered_through_seq=covered,
            trimmed=(*head_entries, *state.entries),
            pruned_seqs=(),
            over_trigger=total > trigger,
            compaction=None,
            sent_seqs=sent_seqs,
            pinned_seqs=tuple(head_seqs),
            orphan_seqs=tuple(orphans[bisect_right(orphans, covered) :]),
            repaired=(*repaired, *state.repaired),
            input_budget=budget.input_budget,
            trigger_tokens=trigger,
            sent_ranges=(sent_seqs, tuple(ranges)),
        )
    return Projection(messages=messages, record=record)

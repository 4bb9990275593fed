"""`TailState`: the previous projection's rendered tail, as flat lists that cut and grow in O(1).

Problem: reassembling a projection from the previous call's rendering (`memo.incremental`)
needs, per rendered slot, what was sent, its seqs, trim entries, repairs and running token
totals, and must drop everything after any slot cheaply when the branch changed there.

Invariant: lists ending in `_ends` hold running offsets per slot, starting with 0: slot i's
messages are `body[msg_ends[i]:msg_ends[i + 1]]`, and so on; `ranges` is `sent` as inclusive
ranges. `truncate(n)` then `append(...)` keeps both true.

Example: slots of groups 3 and 5 sending seqs (4, 5) and (7,) -> sent [4, 5, 7],
seq_ends [0, 2, 3], ranges [(4, 5), (7, 7)]; truncate(1) -> sent [4, 5], ranges [(4, 5)].
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from policies.base import Message
from policies.config import PolicyConfig
from policies.draft import CountFn, Slot
from policies.outcome import TrimEntry
from policies.text import clone

_START = itemgetter(0)
NO_TRIM = -1
"""`TailState.boundary` when the order has no `trim_tool_results` step"""


@dataclass(eq=False)
class TailState:
    """The rendered uncovered groups of the previous projection of one branch (pre-pruning).

    Mutable, owned by a `ProjectionCache` (whose owner serializes calls). Lists ending in
    `_ends` hold running offsets per slot, starting with 0: slot i's messages are
    `body[msg_ends[i]:msg_ends[i + 1]]`, and so on."""

    serial: object = None
    """`HistoryIndex.serial` of the index the state was built with"""
    stable_groups: int = 0
    """that index's `stable_groups`: later indexes share the groups before it"""
    covered: int = 0
    config: PolicyConfig | None = None
    count: CountFn | None = None
    boundary: int = NO_TRIM
    trims: bool = False
    """the slots were trimmed (`trim_tool_results` ran: not a pass-through request)"""
    recall_tool: str | None = None
    released: tuple[int, ...] = ()
    """`StepContext.released` of the call the state was built for"""
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
    tool_at: list[int] = field(default_factory=list)
    """positions in `body` of its tool results, ascending (where a cache point can go)"""

    def truncate(self, slots: int) -> None:
        """Forget every slot from position `slots` on."""
        del self.slot_groups[slots:]
        del self.tool_at[bisect_left(self.tool_at, self.msg_ends[slots]) :]
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
        at = len(self.body)
        self.tool_at.extend(at + k for k, message in enumerate(messages) if message.get("role") == "tool")
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

"""Last resort: drop the oldest unpinned groups whole, then cut, then fail clearly.

Problem: a projection can still exceed the input budget (no checkpoint yet, compaction failed or
is running in the background, a burst of huge results). The request must fit — or be refused
with the numbers, never silently truncated.

Rules, applied only while the projection is over `Budget.input_budget`:
1. drop tail groups whole, oldest first, skipping kept groups (pinned, newest user message, the
   last group); their seqs go to `pruned_seqs`, and a marker takes their place (a user-role
   block where the first of them was, naming the dropped events and the recall tool when it is
   offered: nothing is dropped silently; its tokens count like any message's);
2. still over: cut the tool results of the remaining non-protected groups (pinned messages
   excepted, `exclude_tools` included — it is the last resort) to `old_max_chars`, head + tail,
   oldest first;
3. still over: cut the in-flight group's tool results head + tail to fit (`fit_latest`: the
   one exception to "the latest turn is verbatim", with a marker naming size and event);
4. still over: raise `ContextOverflow` with the irreducible size (the newest user message,
   the prefix, tools, pins and summary alone, the in-flight results reduced to their markers).

Invariant: groups are dropped whole and cut results keep their ids, so tool pairing survives;
the newest user message is never cut (DESIGN 3) — if it does not fit, that is the overflow.

Example: input budget 8,000; prefix 500, pinned task 300, summary 700, ten groups of 900 and the
latest turn 1,200 -> drop the six oldest groups (pruned_seqs lists their events), add the marker
``<pruned_history events="e12-e41">`` -> about 6,360 sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from policies.base import ContextOverflow, Message
from policies.draft import Draft, Slot, StepContext
from policies.fit_latest import fit_latest
from policies.outcome import TrimEntry, compact_ranges
from policies.trim_tool_results import cap_slot

PRUNED_MARKER_START = "<pruned_history"


def pruned_marker(seqs: Sequence[int], recall_tool: str | None = None) -> Message:
    """The block that stands where groups were dropped: which events, that they are stored, and
    how the model can read them (data, like the summary block, never instructions)."""
    ranges = ", ".join(f"e{a}" if a == b else f"e{a}-e{b}" for a, b in compact_ranges(seqs))
    fetch = f" The {recall_tool} tool can search and read them." if recall_tool else ""
    return {
        "role": "user",
        "content": (
            f'{PRUNED_MARKER_START} events="{ranges}">{len(seqs):,} earlier events of this conversation were left out '
            f"of this request to fit the context window; they are stored, not lost.{fetch}</pruned_history>"
        ),
    }


def _restore_originals(slot: Slot) -> Slot:
    """The slot with raw item messages, so a cut starts from the original text (one record)."""
    originals = {item.seq: item for item in slot.group.items}
    for position, seq in enumerate(slot.seqs):
        if seq is not None and slot.messages[position] is not originals[seq].message:
            slot = slot.with_message(position, originals[seq].message, originals[seq].tokens)
    return slot


def _cut(slot: Slot, ctx: StepContext) -> tuple[Slot, list[TrimEntry]]:
    # the last resort: the excluded tools' results are cut too
    return cap_slot(_restore_originals(slot), ctx.config.tool_results.old_max_chars, ctx, exclude=())


def prune_groups(draft: Draft, ctx: StepContext) -> Draft:
    """Pipeline step: make the draft fit the input budget or raise `ContextOverflow`."""
    budget = ctx.budget
    limit = budget.input_budget
    total = draft.total
    if total <= limit:
        return draft

    draft = _drop(draft, ctx, limit)
    total = draft.total

    if total > limit:
        entries = list(draft.trimmed)
        head = list(draft.head)
        tail = list(draft.tail)
        for slots in (head, tail):
            for position, slot in enumerate(slots):
                if total <= limit:
                    break
                if slot.protected:
                    continue
                cut, new_entries = _cut(slot, ctx)
                if cut.total < slot.total:
                    total += cut.total - slot.total
                    slots[position] = cut
                    cut_seqs = {entry.seq for entry in new_entries}
                    entries = [e for e in entries if e.seq not in cut_seqs] + new_entries
        draft = replace(draft, head=tuple(head), tail=tuple(tail), trimmed=tuple(entries))

    draft = fit_latest(draft, ctx)
    if draft.total > limit:
        raise ContextOverflow(
            needed_tokens=draft.total,
            input_budget=limit,
            context_window=budget.context_window,
            max_output_tokens=budget.max_output_tokens,
            detail=_what_takes_the_room(draft, ctx),
        )
    return draft


def _drop(draft: Draft, ctx: StepContext, limit: int) -> Draft:
    """Drop unkept tail groups, oldest first, until the draft with its marker fits `limit` (or
    nothing more may be dropped)."""
    tail = list(draft.tail)
    pruned = list(draft.pruned_seqs)
    total = draft.total - draft.marker_tokens
    marker: tuple[Message, ...] = draft.marker
    marker_tokens = draft.marker_tokens
    position, marker_at = 0, draft.marker_at if draft.marker else None
    while True:
        while total + marker_tokens > limit and position < len(tail):
            slot = tail[position]
            if slot.keep:
                position += 1
                continue
            total -= slot.total
            pruned.extend(item.seq for item in slot.group.items)
            del tail[position]
            marker_at = position if marker_at is None else marker_at
            if not marker_tokens:
                marker_tokens = ctx.count(pruned_marker(pruned, ctx.recall_tool))
        if not pruned:
            return draft
        marker = (pruned_marker(sorted(pruned), ctx.recall_tool),)
        counted = ctx.count(marker[0])
        if counted <= marker_tokens or total + counted <= limit or position >= len(tail):
            marker_tokens = counted
            break
        marker_tokens = counted  # the marker grew past the room: drop more for it
    return replace(
        draft,
        tail=tuple(tail),
        pruned_seqs=tuple(sorted(pruned)),
        marker=marker,
        marker_tokens=marker_tokens,
        marker_at=marker_at or 0,
    )


def _what_takes_the_room(draft: Draft, ctx: StepContext) -> str:
    """Where the irreducible tokens are: tools and framing, prefix, summary, pins, newest turn."""
    latest = sum(slot.total for slot in draft.slots if slot.protected)
    pinned = sum(slot.total for slot in draft.slots if not slot.protected)
    parts = [
        f"tools and framing {draft.fixed_tokens:,}",
        f"system/developer {draft.prefix_tokens:,}",
        f"summary {draft.summary_tokens:,}",
        f"pruned marker {draft.marker_tokens:,}",
        f"pinned messages {pinned:,}",
        f"newest user message and in-flight turn {latest:,}"
        + (" with its tool results cut to their markers" if draft.cut_to_fit else ""),
    ]
    return " + ".join(parts)

"""What a projection produces: the messages to send and the record of how they were made.

Problem: a projection's caller needs more than the messages: the call record and "print what is
actually sent" say which events were sent, trimmed, pruned or covered, and which compaction the
projection planned. These values carry that, immutable, with their JSON forms (`to_dict`, and
`summary_dict`, the compact form kept with every call record).

Invariant: every item seq is accounted for exactly once in a `ProjectionRecord` (see its
docstring); `policies.projection_record` derives the record, in one place, for both the pipeline
and the memo.

Example: sent seqs (1, 2, 3, 7) appear in JSON as `[[1, 3], [7, 7]]` (`compact_ranges`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import ne
from typing import Any

from policies.base import Item


@dataclass(frozen=True)
class TrimEntry:
    """One tool result shortened in the projection (the raw event is untouched)."""

    seq: int
    tool_call_id: str
    original_chars: int
    kept_chars: int
    how: str = "head+tail"
    """what shortened it: `head+tail`, `repeat`, `near-repeat` or a content kind (`test output`...)"""

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "tool_call_id": self.tool_call_id,
            "original_chars": self.original_chars,
            "kept_chars": self.kept_chars,
            "how": self.how,
        }


@dataclass(frozen=True)
class CompactionPlan:
    """Summarize items from_seq..through_seq, chunk by chunk (rolling), then commit a checkpoint
    with covered_through_seq = through_seq. Chunks hold whole groups; an item whose text had to be
    cut so the summarizer request fits is a new `Item` with the same seq and the cut message."""

    from_seq: int
    through_seq: int
    chunks: tuple[tuple[Item, ...], ...]
    reason: str
    released_pins: tuple[int, ...] = ()
    """pins released by the projection that planned this (`pins.release_pins`): the summarizer
    sees them as history, not among the messages kept verbatim"""
    summary_room: int | None = None
    """the longest summary the projection after the commit has room for (it lands halfway
    between target and trigger); None: not known. A summary over `Budget.summary_max_tokens` but
    within it is kept (recorded as long); a longer one is cut to it"""
    wait: bool = False
    """the request that planned it waits for the commit (`PolicyConfig.first_rewrite`)"""

    def to_dict(self) -> dict[str, Any]:
        return {
            "from_seq": self.from_seq,
            "through_seq": self.through_seq,
            "chunks": [
                {
                    "first_seq": chunk[0].seq,
                    "last_seq": chunk[-1].seq,
                    "items": len(chunk),
                    "tokens": sum(item.tokens for item in chunk),
                }
                for chunk in self.chunks
                if chunk
            ],
            "reason": self.reason,
            "released_pins": compact_ranges(self.released_pins),
            "summary_room": self.summary_room,
            "wait": self.wait,
        }


def compact_ranges(seqs: Sequence[int]) -> list[list[int]]:
    """[1, 2, 3, 7] -> [[1, 3], [7, 7]]: compact JSON for long histories. (A range ends where
    the next seq is not the previous one plus one; found with C-level iteration, the Python
    work is per range, not per seq.)"""
    ordered = sorted(seqs)
    if not ordered:
        return []
    successors = map(_PLUS_ONE, ordered)
    breaks = list(compress(range(1, len(ordered)), map(ne, ordered[1:], successors)))
    starts = [ordered[0], *(ordered[i] for i in breaks)]
    ends = [*(ordered[i - 1] for i in breaks), ordered[-1]]
    return [[start, end] for start, end in zip(starts, ends, strict=True)]


_PLUS_ONE = (1).__add__


@dataclass(frozen=True)
class ProjectionRecord:
    """What the projection did, for the call record and "print what is actually sent".

    `client_tokens` is what the client's full history would cost, `sent_tokens` what is sent
    (both include `Budget.fixed_tokens`). `covered_through_seq` is the effective boundary (0 if
    no checkpoint applies; then `checkpoint_generation` is None too). Every item seq is accounted
    for exactly once: covered, in `sent_seqs`, in `pruned_seqs` (dropped by `prune_groups`) or in
    `orphan_seqs` (tool results without a call, never sent) — except `pinned_seqs`: items covered
    by the checkpoint yet still sent verbatim (pinned messages, the newest user message, and the
    rest of their groups). `repaired` lists (assistant seq, tool_call_id) given a synthetic result.
    """

    client_tokens: int
    sent_tokens: int
    checkpoint_generation: int | None
    covered_through_seq: int
    trimmed: tuple[TrimEntry, ...]
    pruned_seqs: tuple[int, ...]
    over_trigger: bool
    compaction: CompactionPlan | None
    sent_seqs: tuple[int, ...] = ()
    pinned_seqs: tuple[int, ...] = ()
    orphan_seqs: tuple[int, ...] = ()
    repaired: tuple[tuple[int, str], ...] = ()
    input_budget: int = 0
    trigger_tokens: int = 0
    cut_to_fit: tuple[int, ...] = ()
    """seqs of the newest turn's tool results cut head + tail because the request could not fit
    otherwise (their entries are in `trimmed` too)"""
    released_pins: tuple[int, ...] = ()
    """seqs pinned by a rule yet treated like other history (summarized, trimmed, pruned): the
    rule pins beyond the first user message took more than half the input budget, so the oldest
    of them were released (`pins.release_pins`)"""
    deferred_generation: int | None = None
    """a committed checkpoint not applied yet: the history still fits as sent (`late_trim`)"""
    rewritten: bool = False
    """what is sent differs from the client's history (a checkpoint applied, results trimmed or
    cut, groups pruned, orphans dropped, calls repaired, or a step that marked its draft): the
    proxy sends the projection; else the client's own bytes"""
    sent_ranges: tuple[tuple[int, ...], tuple[tuple[int, int], ...]] | None = field(
        default=None, compare=False, repr=False
    )
    """(a `sent_seqs` tuple, its ranges) when the projection already had them; `to_dict` uses
    them only while `sent_seqs` is that very tuple (a `replace()` of it recomputes)"""

    def to_dict(self) -> dict[str, Any]:
        hint = self.sent_ranges
        if hint is not None and hint[0] is self.sent_seqs:
            sent = [[start, end] for start, end in hint[1]]
        else:
            sent = compact_ranges(self.sent_seqs)
        return {
            "client_tokens": self.client_tokens,
            "sent_tokens": self.sent_tokens,
            "input_budget": self.input_budget,
            "trigger_tokens": self.trigger_tokens,
            "checkpoint_generation": self.checkpoint_generation,
            "covered_through_seq": self.covered_through_seq,
            "trimmed": [entry.to_dict() for entry in self.trimmed],
            "pruned_seqs": list(self.pruned_seqs),
            "over_trigger": self.over_trigger,
            "compaction": self.compaction.to_dict() if self.compaction else None,
            "sent_seqs": sent,
            "pinned_seqs": list(self.pinned_seqs),
            "orphan_seqs": list(self.orphan_seqs),
            "repaired": [{"seq": seq, "tool_call_id": tid} for seq, tid in self.repaired],
            "cut_to_fit": list(self.cut_to_fit),
            "released_pins": compact_ranges(self.released_pins),
            "deferred_generation": self.deferred_generation,
        }

    def summary_dict(self) -> dict[str, Any]:
        """The compact form kept with every call record: counts and ranges instead of per-event
        lists, so a record's size does not grow with the history (`to_dict` has the details)."""
        return {
            "client_tokens": self.client_tokens,
            "sent_tokens": self.sent_tokens,
            "input_budget": self.input_budget,
            "trigger_tokens": self.trigger_tokens,
            "checkpoint_generation": self.checkpoint_generation,
            "covered_through_seq": self.covered_through_seq,
            "trimmed": len(self.trimmed),
            "trimmed_chars": [
                sum(entry.original_chars for entry in self.trimmed),
                sum(entry.kept_chars for entry in self.trimmed),
            ],
            "pruned_seqs": compact_ranges(self.pruned_seqs),
            "over_trigger": self.over_trigger,
            "compaction": self.compaction.to_dict() if self.compaction else None,
            "sent": len(self.sent_seqs),
            "pinned_seqs": list(self.pinned_seqs),
            "orphans": len(self.orphan_seqs),
            "repaired": len(self.repaired),
            "cut_to_fit": list(self.cut_to_fit),
            "released_pins": compact_ranges(self.released_pins),
            "deferred_generation": self.deferred_generation,
        }


@dataclass(frozen=True)
class Projection:
    """The messages to send and the record of how they were made. `messages` is a fresh list of
    read-only dicts: untouched messages are the caller's own objects, rewritten ones (trimmed,
    repaired, the summary block) may be shared with other projections through a memoizing
    `draft.Renderer`. Serialize them; never mutate them.

    `cache_point`: index in `messages` of the last tool result of the groups trimmed as old
    (`trim_tool_results`' boundary), None when none is sent. Everything up to it keeps its bytes
    until the boundary next moves, so a prompt cache entry ending there is read on that move,
    when everything after it changes (the Anthropic wire puts a breakpoint there).
    `previous_point`: where `cache_point` was before the boundary's last move (None: nowhere
    sent). The move's request reads the cache entry that ended there; a cache that looks for it
    only a few blocks back from the new point (Anthropic: 20) needs a breakpoint on it too."""

    messages: list[dict[str, Any]]
    record: ProjectionRecord
    cache_point: int | None = None
    previous_point: int | None = None

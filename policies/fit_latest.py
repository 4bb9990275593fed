"""The newest turn too large: cut its tool results head + tail so the request still fits.

Problem: an agent's newest tool call returned more than the window holds (a 60,000-token log for
a 16k model). `prune_groups` has dropped and cut everything else it may, yet the request does
not fit; a 400 would stop the agent at the very step that needs an answer. DESIGN invariant 3
allows one exception to "the latest turn is verbatim": in-flight tool results that cannot fit
are cut head + tail, with a marker naming their size and event (recall can fetch the rest).

Rule: one character cap for all results of the in-flight group, the largest that fits (found by
bisection over the cap): a result no longer than the cap stays whole, a longer one keeps its
first and last characters (`head_ratio` of the cap first) around a marker::

    [trimmed to fit the context window: tool result of bash, 60,012 tokens (240,048 chars);
     first 9,900 and last 9,900 chars kept; event 57; ctxproxy_recall can fetch it]

(one line; the recall clause only when the request offers the recall tool). The assistant
message with the calls is untouched and every result keeps its `tool_call_id`, so pairing is
exactly what it was. When even every result reduced to its marker does not fit, the caller
raises `ContextOverflow` with that irreducible size.

The stored event keeps the whole result (the projection never edits history); the cut is
recorded in `ProjectionRecord.trimmed` and `cut_to_fit`.

Example: input budget 7,000, the rest of the request 2,000 tokens, one result of 60,000
tokens -> a cap of about 19,800 chars: head 9,900 + marker + tail 9,900, about 5,000 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from policies.base import Message
from policies.draft import CountFn, Draft, Slot, StepContext
from policies.outcome import TrimEntry
from policies.text import content_text, cut_text, non_text_parts, with_content
from policies.trim_tool_results import recall_hint

FIT_MARKER_START = "[trimmed to fit the context window: "


@dataclass(frozen=True)
class Cut:
    """A result of the newest turn cut to fit: its tool, original size (`tokens`, `chars`), what
    was kept (`head`, `tail` chars), its event, the non-text parts dropped."""

    tool_name: str
    tokens: int
    chars: int
    head: int
    tail: int
    seq: int
    dropped: int = 0

    def marker(self, recall_tool: str | None = None) -> str:
        """The line that stands for the cut part (naming the recall tool when it is offered)."""
        extra = f"; {self.dropped} non-text part(s) dropped" if self.dropped else ""
        return (
            f"{FIT_MARKER_START}tool result of {self.tool_name}, {self.tokens:,} tokens ({self.chars:,} chars); "
            f"first {self.head:,} and last {self.tail:,} chars kept; event {self.seq}{extra}{recall_hint(recall_tool)}]"
        )


def cut_result(
    message: Message,
    *,
    tokens: int,
    max_chars: int,
    head_ratio: float,
    tool_name: str,
    seq: int,
    recall_tool: str | None = None,
) -> tuple[dict[str, object], int]:
    """`message` (a tool result of `tokens` tokens) cut to `max_chars` of text around the marker,
    and the characters kept."""
    content = message.get("content")
    text = content_text(content)
    head, tail = cut_text(text, min(max_chars, len(text)), head_ratio)
    marker = Cut(tool_name, tokens, len(text), len(head), len(tail), seq, non_text_parts(content)).marker(recall_tool)
    return with_content(message, "\n".join(part for part in (head, marker, tail) if part)), len(head) + len(tail)


def _results(slot: Slot) -> list[int]:
    """Positions of the recorded tool results of `slot` (synthetic repairs have no seq)."""
    return [
        position
        for position, (seq, message) in enumerate(zip(slot.seqs, slot.messages, strict=True))
        if seq is not None and message.get("role") == "tool"
    ]


def cut_slot(
    slot: Slot, max_chars: int, head_ratio: float, count: CountFn, recall_tool: str | None = None
) -> tuple[Slot, list[TrimEntry]]:
    """`slot` with every result longer than `max_chars` cut to it; a cut that would cost more
    tokens than the result (a short result's marker) leaves the result whole."""
    entries: list[TrimEntry] = []
    for position in _results(slot):
        message = slot.messages[position]
        text = content_text(message.get("content"))
        if len(text) <= max_chars and not non_text_parts(message.get("content")):
            continue
        seq = slot.seqs[position]
        assert seq is not None
        tool_call_id = str(message.get("tool_call_id", ""))
        cut, kept = cut_result(
            message,
            tokens=slot.tokens[position],
            max_chars=max_chars,
            head_ratio=head_ratio,
            tool_name=slot.group.tool_name(tool_call_id),
            seq=seq,
            recall_tool=recall_tool,
        )
        tokens = count(cut)
        if tokens >= slot.tokens[position]:
            continue
        slot = slot.with_message(position, cut, tokens)
        entries.append(TrimEntry(seq, tool_call_id, len(text), kept))
    return slot, entries


def fit_slot(slot: Slot, room: int, ctx: StepContext) -> tuple[Slot, list[TrimEntry]]:
    """`slot` with its results cut to the largest common cap for which it costs at most `room`
    tokens; when none does, cut to the markers alone (the caller then reports the overflow)."""
    head_ratio = ctx.config.tool_results.head_ratio
    positions = _results(slot)
    if not positions:
        return slot, []
    best = cut_slot(slot, 0, head_ratio, ctx.count, ctx.recall_tool)
    if best[0].total > room:
        return best
    low, high = 1, max(len(content_text(slot.messages[p].get("content"))) for p in positions)
    while low <= high:
        middle = (low + high) // 2
        candidate = cut_slot(slot, middle, head_ratio, ctx.count, ctx.recall_tool)
        if candidate[0].total <= room:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best


def fit_latest(draft: Draft, ctx: StepContext) -> Draft:
    """The draft with the in-flight tool group's results cut so the whole fits the input budget
    (as far as cutting them can go); unchanged when it fits or there is no such group."""
    limit = ctx.budget.input_budget
    if draft.total <= limit or not draft.tail:
        return draft
    slot = draft.tail[-1]
    if not slot.protected or slot.group.kind != "tool_call":
        return draft
    cut, entries = fit_slot(slot, limit - (draft.total - slot.total), ctx)
    if not entries:
        return draft
    seqs = {entry.seq for entry in entries}
    return replace(
        draft,
        tail=(*draft.tail[:-1], cut),
        trimmed=tuple(entry for entry in draft.trimmed if entry.seq not in seqs) + tuple(entries),
        cut_to_fit=tuple(sorted(seqs)),
    )

"""How one tool result is shortened, and the marker that says how: the rendering half of trimming.

`trim_tool_results` decides which results are trimmed and with what (a `Shaping`: the cap, the
tool's rule, what later groups say about the result); this module renders one result from that,
lossless first:
1. `repeat`: identical to a later result -> one marker naming that event (`policies.repeats`);
2. `near-repeat`: the same call as a later result, a few lines apart -> the marker and the line
   delta against that result, when the delta fits the cap and keeps every quote;
3. `type-aware`: an excerpt by content (`policies.shaping`), the marker first, saying what kind it
   read, what it kept, how many lines it left out, the event and the recall tool; its budget is
   the cap grown for its key lines or made lean without them (`budget_of`);
4. otherwise head + tail (`trim_message`): at that budget for text of no kind, at the cap for
   the `trim` action (when a later call quotes the result, a line excerpt that keeps the quotes
   instead).
A result whose trimmed form would not be shorter is left whole.

Invariant: a function of (message, `Shaping`) alone, so the bytes of a trimmed result stay the
same from turn to turn; the memo (`policies.memo`) keys on exactly that.

Example::

    shape_message(result("c1", pytest_output), Shaping(57, "bash", "{}", 400, "type-aware", 0.5, None))
    # "[trimmed: test output of bash, 4,210 chars; kept the failures, ... ; event 57]\\n..."
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.base import Message
from policies.later import focus_of
from policies.outcome import TrimEntry
from policies.repeats import near_marker, near_repeat, repeat_marker
from policies.shaping import Shaped, excerpt_budget, shape_text
from policies.text import content_text, cut_text, non_text_parts, with_content

Trimmed = tuple[dict[str, object], TrimEntry]


@dataclass(frozen=True, slots=True)
class Shaping:
    """Everything a trimmed result's bytes depend on besides the result itself."""

    seq: int
    tool: str
    arguments: str
    """the raw arguments of the call that produced it (its focus: what it searched for)"""
    max_chars: int
    action: str
    """`trim` or `type-aware`"""
    head_ratio: float
    recall_tool: str | None
    twin: int | None = None
    """a later event whose result is identical"""
    near: int | None = None
    """a later event of the same call whose result differs (`reference` is its text)"""
    reference: str | None = None
    quotes: tuple[str, ...] = ()
    """verbatim text later calls quote that this result must keep"""


def recall_hint(recall_tool: str | None) -> str:
    """The end of a marker when the request offers the recall tool: it can fetch the rest."""
    return f"; {recall_tool} can fetch it" if recall_tool else ""


def trim_marker(
    tool_name: str, original_chars: int, head: int, tail: int, seq: int, dropped: int, recall_tool: str | None = None
) -> str:
    extra = f"; {dropped} non-text part(s) dropped" if dropped else ""
    return (
        f"[trimmed: tool result of {tool_name}, {original_chars:,} chars; "
        f"first {head:,} and last {tail:,} kept; event {seq}{extra}{recall_hint(recall_tool)}]"
    )


def trim_message(
    message: Message, *, max_chars: int, head_ratio: float, tool_name: str, seq: int, recall_tool: str | None = None
) -> Trimmed | None:
    """The head + tail copy of a tool result and its record, or None when it already fits."""
    content = message.get("content")
    text = content_text(content)
    if len(text) <= max_chars:
        return None
    head, tail = cut_text(text, max_chars, head_ratio)
    marker = trim_marker(tool_name, len(text), len(head), len(tail), seq, non_text_parts(content), recall_tool)
    parts = [part for part in (head, marker, tail) if part]
    if sum(len(part) + 1 for part in parts) >= len(text):
        return None  # the marker would cost more than the cut saves
    trimmed = with_content(message, "\n".join(parts))
    tool_call_id = str(message.get("tool_call_id", ""))
    return trimmed, TrimEntry(seq, tool_call_id, len(text), len(head) + len(tail))


def excerpt_marker(shaped: Shaped, tool: str, chars: int, seq: int, dropped: int, recall_tool: str | None) -> str:
    extra = f"; {dropped} non-text part(s) dropped" if dropped else ""
    kind = shaped.kind or "tool result"
    of_all = f" of {shaped.total:,}" if shaped.total else ""
    return (
        f"[trimmed: {kind} of {tool}, {chars:,} chars; kept {shaped.keeps}; "
        f"{shaped.left_out:,}{of_all} {shaped.unit} left out; event {seq}{extra}{recall_hint(recall_tool)}]"
    )


SHRINK_ROUNDS = 6
"""how many times an excerpt over what head + tail would send is shaped again, its budget cut by
the excess (gap lines and cut lines make the cost of a budget uneven)"""


def budget_of(text: str, spec: Shaping) -> int:
    """The characters `text` keeps once trimmed: the cap for `trim`; for `type-aware`, the cap
    grown for the key lines a result holds, or made lean when it holds none
    (`shaping.excerpt_budget`)."""
    if spec.action != "type-aware":
        return spec.max_chars
    return excerpt_budget(text, spec.max_chars, quotes=spec.quotes, focus=focus_of(spec.arguments))


def excerpt(text: str, spec: Shaping, dropped: int, budget: int) -> tuple[str, Shaped] | None:
    """The marker and excerpt of `text` by content (`shaping.shape_text`), costing no more than
    head + tail at `budget` would (the excerpt's budget is cut by what its marker says more);
    None: no kind applies (the caller cuts head + tail). (what is sent, how it was shaped)"""
    quotes = spec.quotes
    focus = focus_of(spec.arguments) if spec.action == "type-aware" else ()
    if spec.action != "type-aware" and not quotes:
        return None
    plain = len(trim_marker(spec.tool, len(text), 0, 0, spec.seq, dropped, spec.recall_tool)) + 2 + budget
    best: tuple[str, Shaped] | None = None
    for _ in range(SHRINK_ROUNDS):
        shaped = shape_text(text, budget, quotes=quotes, focus=focus)
        if shaped is None:
            break
        best = (
            excerpt_marker(shaped, spec.tool, len(text), spec.seq, dropped, spec.recall_tool) + "\n" + shaped.body,
            shaped,
        )
        over = len(best[0]) - plain
        if over <= 0 or budget <= 0:
            break
        budget = max(0, budget - over)
    return best


def shape_message(message: Message, spec: Shaping) -> Trimmed | None:
    """The trimmed copy of a tool result, and its record: a repeat whatever its size, else when it
    is longer than `spec.max_chars`; None when it fits or no shorter form exists."""
    content = message.get("content")
    text = content_text(content)
    dropped = non_text_parts(content)
    tool_call_id = str(message.get("tool_call_id", ""))
    recall = recall_hint(spec.recall_tool)

    def done(new: str, kept: int, how: str) -> Trimmed | None:
        if len(new) >= len(text):
            return None
        return with_content(message, new), TrimEntry(spec.seq, tool_call_id, len(text), kept, how)

    if spec.action == "type-aware" and not dropped:
        if spec.twin is not None:
            return done(repeat_marker(spec.tool, spec.seq, len(text), spec.twin, recall), 0, "repeat")
        if spec.near is not None and spec.reference is not None:
            delta = near_repeat(spec.reference, text)
            if delta is not None and all(quote in delta for quote in spec.quotes):
                sent = near_marker(spec.tool, spec.seq, len(text), spec.near, recall) + "\n" + delta
                if len(delta) <= spec.max_chars:  # what the excerpt would keep, its marker aside
                    return done(sent, len(delta), "near-repeat")
    if len(text) <= spec.max_chars:
        return None
    budget = budget_of(text, spec)
    shaped = excerpt(text, spec, dropped, budget)
    if shaped is not None:
        return done(shaped[0], shaped[1].kept_chars, shaped[1].kind or "lines")
    if spec.quotes:
        return None  # nothing shorter keeps the quotes: whole
    return trim_message(
        message,
        max_chars=budget,
        head_ratio=spec.head_ratio,
        tool_name=spec.tool,
        seq=spec.seq,
        recall_tool=spec.recall_tool,
    )

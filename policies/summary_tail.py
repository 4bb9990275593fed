"""Summary + raw tail: decide when to compact and what to summarize, in bounded chunks.

Problem: trimming alone cannot keep a long agent run inside the window. Once the projection
crosses `trigger` x input budget, the oldest uncovered groups are summarized (rolling: previous
summary + next chunk) and a new checkpoint replaces them; a raw tail of recent groups stays.

Rules:
- trigger: projected tokens > `trigger` x input_budget (default 80%). Below it the old checkpoint
  stays (compaction is batched, not per turn).
- target: after compaction the projection should be about `target` x input_budget (default 50%,
  well below the trigger). The room for the raw tail is `target x input_budget - overhead`, where
  overhead = fixed + prefix + pinned + the summary (the larger of the current one and
  `Budget.summary_max_tokens`, the longest summary the commit may bring). The tail is the
  shortest run of newest groups holding at least `keep_recent_tokens` (pi: 20,000; as currently
  sent, i.e. after trimming), cut at a group boundary, but it stops growing before a group that
  would take it past the room (so a 16k-window model does not try to keep a 20k tail, and the
  projection after the commit lands near target, not a group above it); the last group is
  always in it, so the latest turn is never summarized, however large.
- A futile compaction -> no plan: when what would be summarized costs no more than the growth of
  the summary block (a summary as long as `Budget.summary_max_tokens` replacing the current one),
  the commit would not shrink the projection, and over an irreducible request (a pinned task
  alone near the trigger) it would run again on every turn, a summarizer call each time.
- Room for the summary: the plan says how long a summary the projection after the commit can
  take (`CompactionPlan.summary_room`, landing halfway between target and trigger), so a summary
  that overshoots `summary_max_tokens` a little is kept rather than thrown away.
- Nothing to summarize (everything uncovered is tail) -> no plan. This is what stops a single
  huge tool result from looping compaction: the plan is None and `prune_groups` or
  `ContextOverflow` takes over.
- chunks: whole groups, each <= the chunk limit = min(`summary_chunk_tokens`, what fits in the
  summarizer's own input budget next to its prompt, the previous summary and the pinned texts,
  and, only when the range needs more than one chunk, the summary that rolls into the next
  chunk's request). A range that fits one call is one call: a second call would cost its prompt,
  the pinned texts and a whole new summary again for a few groups.
  A group larger than the limit gets a chunk of its own with its texts cut (binary search on a
  per-message char cap; a tool result to its key lines by content, so the summarizer still sees a
  test run's failures, other text head + tail) — the summarizer request itself must never overflow.

Example: input budget 14,000, trigger 0.8 -> compact above 11,200; target 0.5 -> 7,000; with
2,500 tokens of overhead the tail keeps the newest groups that fit in 4,500 tokens (fewer than
`keep_recent_tokens`, 20,000) and everything uncovered before them goes into chunks.

`summary_tail` is the pipeline step: it flags the trigger and attaches the plan to the draft
(`ProjectionRecord.compaction`); it never rewrites messages. With `late_trim`, a request over
the trigger that still goes as sent plans nothing: a session that ends before it stops fitting
never pays a summarizer for a summary it does not use (the bench's replays: 6 of the 13 runs
that fit an 8k window cost 1.23-1.43x without the proxy when the summary was computed early, from
the trigger on; none now). The first request that stops fitting is trimmed and, with `first_rewrite:
compact`, plans even under the trigger (`CompactionPlan.wait`: the request waits for the summary,
so its rewrite of the prefix is the compaction's, not a trim's followed by the summary's);
with `trim` it plans only if still over the trigger. A checkpoint a branch already has waits
meanwhile (`StepContext.deferred`).
The summarizer prompt, the summary block and the summary checks live in `summary_prompt` and are
re-exported here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

from policies.base import Budget, Checkpoint, Item, Message
from policies.config import PolicyConfig
from policies.draft import CountFn, Draft, Inputs, StepContext
from policies.groups import Group, effective_boundary, group_items, last_index, normalize_boundary
from policies.key_lines import split
from policies.outcome import CompactionPlan
from policies.pins import pinned_seqs
from policies.shaping import shape_text
from policies.summary_prompt import (
    EVENT_OVERHEAD_TOKENS,
    PINNED_MAX_CHARS,
    SUMMARY_PROMPT_TOKENS,
    build_summary_messages,
    check_summary,
    summary_block,
)
from policies.text import call_arguments, content_text, cut_text, tool_calls, with_content

MIN_CHUNK_TOKENS = 512
_FIRST_SEQ = attrgetter("first_seq")
_CUT_HEAD_RATIO = 0.5

__all__ = [
    "build_summary_messages",
    "check_summary",
    "chunk_limit",
    "Standing",
    "plan_compaction",
    "summary_block",
    "summary_tail",
]


def chunk_limit(
    budget: Budget,
    config: PolicyConfig,
    *,
    previous_summary_tokens: int,
    pinned_tokens: int,
    rolling_summary_tokens: int = 0,
) -> int:
    """Max history tokens per summarizer call, so that prompt + previous summary + pinned texts
    + chunk fit the summarizer's input budget (the reply has max_output_tokens reserved).
    `rolling_summary_tokens`: how large a summary written by this compaction can be; from the
    second chunk on it is the previous summary, so the room reserves the larger of the two."""
    pinned = min(pinned_tokens, PINNED_MAX_CHARS // 3)
    room = budget.input_budget - budget.fixed_tokens - SUMMARY_PROMPT_TOKENS
    room -= max(previous_summary_tokens, rolling_summary_tokens) + pinned
    return max(MIN_CHUNK_TOKENS, min(config.summary_chunk_tokens, room))


def _shown_tokens(checkpoint: Checkpoint | None, count: CountFn) -> int:
    """The previous summary as the summarizer is shown it: the model's own text, without the key
    lines of tool output ctxproxy carries after it (`policies.key_lines`)."""
    if checkpoint is None:
        return 0
    own, carried = split(checkpoint.summary)
    return count(summary_block(own, checkpoint.covered_through_seq)) if carried else checkpoint.tokens


def _rolling_summary_tokens(summary_budget: Budget | None, summary_max_tokens: int | None) -> int:
    reserve = summary_budget.max_output_tokens if summary_budget else 0
    return min(reserve, summary_max_tokens) if summary_max_tokens else reserve


def _cut_marker(original: int, head: int, tail: int) -> str:
    return f"[cut for summarization: {original:,} chars; first {head:,} and last {tail:,} kept]"


def _cut(text: str, max_chars: int) -> str:
    head, tail = cut_text(text, max_chars, _CUT_HEAD_RATIO)
    return "\n".join([head, _cut_marker(len(text), len(head), len(tail)), tail])


def _cut_result(text: str, max_chars: int) -> str:
    """A tool result cut for the summarizer: the lines that matter by its content (a test run's
    failures, a log's errors, `policies.shaping`), so the summary can name them; head + tail for
    text of no kind."""
    shaped = shape_text(text, max_chars)
    if shaped is None:
        return _cut(text, max_chars)
    kind = shaped.kind or "tool result"
    return (
        f"[cut for summarization: {kind}, {len(text):,} chars; kept {shaped.keeps}; "
        f"{shaped.left_out:,} {shaped.unit} left out]\n{shaped.body}"
    )


def cut_message(message: Message, max_chars: int) -> Message:
    """A copy of `message` whose content text and tool-call arguments keep at most `max_chars`
    each (a tool result its key lines, `_cut_result`; other text head + tail); returns `message`
    itself when nothing is longer."""
    out: Message = message
    text = content_text(message.get("content"))
    if len(text) > max_chars:
        cut = _cut_result if message.get("role") == "tool" else _cut
        out = with_content(out, cut(text, max_chars))
    calls = tool_calls(message)
    if any(len(call_arguments(call)) > max_chars for call in calls):
        new_calls = []
        for call in calls:
            arguments = call_arguments(call)
            if len(arguments) > max_chars:
                function = {**call.get("function", {}), "arguments": _cut(arguments, max_chars)}
                call = {**call, "function": function}
            new_calls.append(call)
        out = {**out, "tool_calls": new_calls}
    return out


def _longest_text(items: Sequence[Item]) -> int:
    lengths = [len(content_text(item.message.get("content"))) for item in items]
    lengths += [len(call_arguments(call)) for item in items for call in tool_calls(item.message)]
    return max(lengths, default=0)


def _chunk_cost(items: Sequence[Item]) -> int:
    return sum(item.tokens + EVENT_OVERHEAD_TOKENS for item in items)


def fit_group(group: Group, limit: int, count: CountFn) -> tuple[Item, ...]:
    """The group's items, texts cut so the chunk costs <= `limit` (as far as cutting can go:
    a group of hundreds of calls may stay above it even with every text cut to its marker)."""
    if _chunk_cost(group.items) <= limit:
        return group.items

    def cut_items(max_chars: int) -> tuple[Item, ...]:
        out = []
        for item in group.items:
            message = cut_message(item.message, max_chars)
            tokens = item.tokens if message is item.message else count(message)
            out.append(Item(item.seq, message, tokens))
        return tuple(out)

    low, high = 0, _longest_text(group.items)
    best = cut_items(0)
    while low <= high:  # binary search for the largest per-text cap that fits
        middle = (low + high) // 2
        candidate = cut_items(middle)
        if _chunk_cost(candidate) <= limit:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best


def _units(groups: Sequence[Group]) -> list[Group]:
    """`groups` with each orphan result that sits inside a tool group's span (a stray result
    between two of its results) merged into that group, items in history order: a chunk then
    lists events in seq order, and the orphan never lands in a chunk of its own before or after
    its neighbours."""
    units: list[Group] = []
    for group in groups:
        if group.kind == "orphan" and units and units[-1].first_seq < group.first_seq < units[-1].last_seq:
            unit = units[-1]
            merged = tuple(sorted((*unit.items, *group.items), key=_SEQ))
            units[-1] = Group(unit.kind, merged, unit.missing_ids)
        else:
            units.append(group)
    return units


_SEQ = attrgetter("seq")


def make_chunks(groups: Sequence[Group], limit: int, count: CountFn) -> tuple[tuple[Item, ...], ...]:
    """Pack whole groups (with the orphan results inside their span), oldest first, into chunks
    of at most `limit` tokens; every chunk lists its items in history order. A group larger than
    the limit is cut to fit: into the room the chunk before it leaves when that is at least half
    a chunk, else alone."""
    chunks: list[tuple[Item, ...]] = []
    current: list[Item] = []
    current_cost = 0
    for group in _units(groups):
        cost = _chunk_cost(group.items)
        if cost > limit:
            cut = fit_group(group, limit - current_cost, count) if limit - current_cost >= limit // 2 else None
            if current and cut is not None and current_cost + _chunk_cost(cut) <= limit:
                chunks.append((*current, *cut))  # joins the chunk before it: no tiny chunk of its own
            else:
                if current:
                    chunks.append(tuple(current))
                chunks.append(fit_group(group, limit, count))
            current, current_cost = [], 0
            continue
        if current and current_cost + cost > limit:
            chunks.append(tuple(current))
            current, current_cost = [], 0
        current.extend(group.items)
        current_cost += cost
    if current:
        chunks.append(tuple(current))
    return tuple(chunks)


def split_chunk(chunk: Sequence[Item], count: CountFn) -> tuple[tuple[Item, ...], ...] | None:
    """`chunk` as two chunks of about half its tokens each, groups whole (for a summarizer whose
    window turned out smaller than planned); a chunk of one group is that group with its texts
    cut to half its cost. None when it cannot get smaller."""
    units = _units(group_items(chunk))
    cost = _chunk_cost(chunk)
    if len(units) == 1:
        cut = fit_group(units[0], cost // 2, count)
        return (cut,) if _chunk_cost(cut) < cost else None
    half, first = 0, 0
    while first < len(units) - 1 and half + _chunk_cost(units[first].items) <= cost // 2:
        half += _chunk_cost(units[first].items)
        first += 1
    first = max(1, first)
    return (
        tuple(item for unit in units[:first] for item in unit.items),
        tuple(item for unit in units[first:] for item in unit.items),
    )


@dataclass(frozen=True)
class Standing:
    """Where the projection that plans stands: its total (`projected`), the part of it that is not
    raw tail (`overhead`: fixed + prefix + kept groups + current summary), and what each seq
    costs as currently sent (`sent`: 0 for kept groups; None: each item's own tokens)."""

    projected: int
    overhead: int
    sent: Mapping[int, int] | None = None


def plan_compaction(inputs: Inputs, standing: Standing, ctx: StepContext | None = None) -> CompactionPlan | None:
    """The next compaction to run, or None (under the trigger, or nothing left to summarize).
    `ctx`: the projection's context, when the caller has it (its groups, pins and index spare
    finding them again). The summarizer's limits are `Budget.summarizer`'s (the budget's own
    when None)."""
    items, checkpoint, budget, config, count = (
        inputs.items,
        inputs.checkpoint,
        inputs.budget,
        inputs.config,
        inputs.count,
    )
    projected_tokens, overhead_tokens, sent_tokens = standing.projected, standing.overhead, standing.sent
    trigger_tokens = int(config.trigger * budget.input_budget)
    if projected_tokens <= trigger_tokens:
        return None
    groups = list(ctx.groups) if ctx is not None else group_items(items)
    covered = effective_boundary(groups, checkpoint)
    # groups' first seqs increase strictly, and no group straddles `covered`
    uncovered = groups[bisect_right(groups, covered, key=_FIRST_SEQ) :]
    if len(uncovered) < 2:
        return None

    def cost(group: Group) -> int:
        if sent_tokens is None:
            return group.tokens
        return sum(sent_tokens.get(item.seq, 0) for item in group.items)

    target_tokens = int(config.target * budget.input_budget)
    current_summary = checkpoint.tokens if checkpoint is not None and covered > 0 else 0
    # the commit's summary may be larger: as long as the limit, in its block (the framing counts too)
    framing = count(summary_block("", 0)) if budget.summary_max_tokens else 0
    growth = max(0, (budget.summary_max_tokens or 0) + framing - current_summary)
    room = max(0, target_tokens - overhead_tokens - growth)
    keep = min(config.keep_recent_tokens, room)
    tail_start = last_index(uncovered)  # the latest turn is never summarized
    if tail_start <= 0:
        return None
    kept = sum(cost(group) for group in uncovered[tail_start:])
    while tail_start > 0 and kept < keep and kept + cost(uncovered[tail_start - 1]) <= room:
        tail_start -= 1
        kept += cost(uncovered[tail_start])
    if tail_start == 0:
        return None
    through = normalize_boundary(groups, uncovered[tail_start].first_seq - 1)
    summarize = [group for group in uncovered if group.last_seq <= through]
    if not summarize:
        return None
    if budget.summary_max_tokens and sum(map(cost, summarize)) <= growth:
        return None  # futile: a summary as long as allowed would not be shorter than what it replaces

    if ctx is not None and ctx.index is not None:
        pinned_tokens = ctx.index.tokens_of(ctx.pinned)
    else:
        pinned = ctx.pinned if ctx is not None else pinned_seqs(items, config.pins)
        pinned_tokens = sum(item.tokens for item in items if item.seq in pinned)
    summary_budget = budget.summarizer
    previous_tokens = _shown_tokens(checkpoint, count)
    limit = chunk_limit(
        summary_budget or budget, config, previous_summary_tokens=previous_tokens, pinned_tokens=pinned_tokens
    )
    if sum(_chunk_cost(group.items) for group in summarize) > limit:
        # several chunks: each summary rolls into the next chunk's request, at most its reply
        # reserve long and no longer than the longest summary accepted (a longer one is rejected)
        limit = chunk_limit(
            summary_budget or budget,
            config,
            previous_summary_tokens=previous_tokens,
            pinned_tokens=pinned_tokens,
            rolling_summary_tokens=_rolling_summary_tokens(summary_budget, budget.summary_max_tokens),
        )
    landing = overhead_tokens - current_summary + kept + framing  # after the commit, but its summary
    summary_room = max(budget.summary_max_tokens or 0, (target_tokens + trigger_tokens) // 2 - landing)
    reason = (
        f"projected {projected_tokens:,} tokens > trigger {trigger_tokens:,} "
        f"({config.trigger:.0%} of input budget {budget.input_budget:,}); "
        f"keeping a raw tail of {kept:,} tokens (room {room:,} below target {target_tokens:,}) after e{through}"
    )
    return CompactionPlan(
        from_seq=min(group.first_seq for group in summarize),
        through_seq=through,
        chunks=make_chunks(summarize, limit, count),
        reason=reason,
        summary_room=summary_room if budget.summary_max_tokens else None,
    )


def summary_tail(draft: Draft, ctx: StepContext) -> Draft:
    """Pipeline step: flag the trigger and plan the next compaction (messages unchanged)."""
    over = draft.total > ctx.trigger_tokens
    first = first_rewrite(ctx, bool(draft.trimmed))
    if not over and not first:
        return draft
    passing = ctx.covered_through <= 0 and not draft.trimmed and draft.total <= ctx.pass_through_tokens
    if passing:
        return replace(draft, over_trigger=True)  # `late_trim`: it goes as sent, and nothing is planned
    # A kept group (pinned, the newest user message, the newest group) stays in the projection
    # whatever is summarized: it is overhead, not tail, or the commit would land above target.
    sent: dict[int, int] = {}
    for slot in draft.tail:
        for seq, tokens in zip(slot.seqs, slot.tokens, strict=True):
            if seq is not None:
                sent[seq] = 0 if slot.keep else tokens
    tail_tokens = sum(slot.total for slot in draft.tail if not slot.keep)
    inputs = Inputs((), ctx.items, ctx.checkpoint, ctx.budget, ctx.config, ctx.count)
    # the first rewrite plans from the trigger on whatever the trim left: the rewrite is the compaction's
    standing = max(draft.total, ctx.trigger_tokens + 1) if first else draft.total
    plan = plan_compaction(inputs, Standing(standing, draft.total - tail_tokens, sent), ctx)
    if plan is not None and (ctx.released or first):
        plan = replace(plan, released_pins=ctx.released, wait=first)
    return replace(draft, over_trigger=over, plan=plan)


def first_rewrite(ctx: StepContext, trimmed: bool) -> bool:
    """Whether this projection is a branch's first rewrite that `first_rewrite: compact` turns
    into a compaction: no checkpoint applies or waits (`deferred`), and the request, no longer
    going as sent, was trimmed."""
    compact = ctx.config.first_rewrite == "compact"
    return compact and trimmed and ctx.covered_through <= 0 and ctx.checkpoint is None and ctx.deferred is None

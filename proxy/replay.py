"""Offline replay: run a saved conversation through a policy turn by turn, no server, no upstream.

How a user decides whether to adopt ctxproxy before deploying it: every point where the client
called the model (each assistant message of the transcript) becomes one request; the policy
projects it exactly as the proxy would, a compaction plan is applied before the next request (as
the proxy's background job would), or at once when the request could only be served by pruning
(`on_overflow: wait`) or is the branch's first rewrite (`first_rewrite: compact`). The report
compares what the client sent with what ctxproxy would send.

Each compaction is priced both ways: as ctxproxy's own summarizer makes it (`mode: text`,
`TurnStat.summarizer_calls`) and as `summarizer.mode: shared` makes it (`TurnStat.shared_calls`):
one call that repeats the last request answered before it plus the ask (`policies.shared_prompt`),
where that request holds the plan's range, leaves room for the ask and was near enough to its
compaction trigger for the proxy to keep it (`proxy.last_sent.NEAR`), else the own summarizer's
calls as the fallback (`shared_fallback`). `ReplayReport.mode` says which of the two the policy
makes (`Summarizer.resolved`: the default, `auto`, is `shared` unless the policy names a
summarizer model; a replay has no litellm route and no memory). The summary is the same either way.

The summarizer is a deterministic stand-in by default (`extractive_summary`: the first line of
each event with its event id, bounded by the route's `summary_max_tokens` as the proxy bounds a
real summary), so the numbers are reproducible; pass another `summarize` callable to measure a
real model. Either way the checkpoint carries the key lines of the tool results it covers after
the summary, as the proxy's compaction does (`policies.key_lines`; the stand-in's bound is then
shorter by what they take, as the proxy asks a real summarizer), so their tokens are priced.

The stand-in also carries corrections of pinned values, as the real prompt asks: a later user
message restating a key of a pinned message with another number ("budget 120" after a pinned
"budget 150") becomes `- budget: 120 (replaces 150 stated in e1; corrected in e41)` under
`## Corrections`, last in the summary, so it outlives the bounded progress lines. Deliberately
conservative: a key (a word of 3+ letters, not a function word) followed by a number, taken only
where a message gives that key one value; anything else is left to the progress lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from policies.base import Checkpoint, ContextOverflow, Item
from policies.compaction import fold_summaries, next_checkpoint
from policies.key_lines import joined, key_lines_section, section_budget, split
from policies.outcome import CompactionPlan
from policies.pins import pinned_items
from policies.projection import project
from policies.shared_prompt import boundary_of, shared_ask
from policies.summary_prompt import SUMMARY_HEAD, build_summary_messages
from policies.text import message_text

from . import identify
from .last_sent import near_trigger
from .policy_settings import Policy, SummaryMode
from .projector import Projector
from .types import Message

Summarize = Callable[[str | None, Sequence[Item]], str]
"""(previous summary, chunk) -> summary; `policies.compaction.Summarize` accepts it"""


CORRECTIONS = "## Corrections"
_KEY_VALUE_RE = re.compile(r"\b([a-z][a-z_-]{2,})\s*(?:[:=]|\bis\b|\bto\b)?\s*(\d+(?:\.\d+)?)\b", re.IGNORECASE)
_CORRECTION_RE = re.compile(r"^- (\S+): (\S+) \(replaces (\S+) stated in e(\d+); corrected in e(\d+)\)$")
_NOT_KEYS = frozenset(
    "and are but for from had has have into not now only or per than that the then this was were with".split()
)


def key_values(text: str) -> dict[str, str]:
    """`key -> number` pairs stated in `text` ("budget 150", "port: 8080"), keys lowercased; a
    key given two different values in the same text is ambiguous and left out."""
    seen: dict[str, set[str]] = {}
    for match in _KEY_VALUE_RE.finditer(text):
        key = match.group(1).lower()
        if key not in _NOT_KEYS:
            seen.setdefault(key, set()).add(match.group(2))
    return {key: values.pop() for key, values in seen.items() if len(values) == 1}


def _corrections(previous: str | None, chunk: Sequence[Item], pinned: Sequence[Item]) -> dict[str, tuple[str, ...]]:
    """key -> (value, replaced value, pinned seq, correcting seq): the previous summary's
    corrections, updated by the chunk's user messages (a restated pinned value drops one)."""
    found: dict[str, tuple[str, ...]] = {}
    for line in (previous or "").partition(CORRECTIONS)[2].splitlines():
        match = _CORRECTION_RE.match(line.strip())
        if match:
            found[match.group(1)] = match.groups()[1:]
    stated = [(item.seq, key_values(message_text(item.message))) for item in pinned]
    pinned_seqs = {item.seq for item in pinned}
    for item in chunk:
        if item.message.get("role") != "user" or item.seq in pinned_seqs:
            continue
        for key, value in key_values(message_text(item.message)).items():
            origin = next(((seq, vals[key]) for seq, vals in stated if key in vals and seq < item.seq), None)
            if origin is None:
                continue
            if value == origin[1]:
                found.pop(key, None)
            else:
                found[key] = (value, origin[1], str(origin[0]), str(item.seq))
    return found


STAND_IN_MAX_CHARS = 4000
"""the stand-in's own bound on its progress lines"""


def extractive_summary(
    previous: str | None, chunk: Sequence[Item], max_chars: int = STAND_IN_MAX_CHARS, pinned: Sequence[Item] = ()
) -> str:
    """A reproducible stand-in for a summarizer: previous summary + first line of each event,
    then the corrections of `pinned` values (module docstring), which the bound never cuts."""
    corrections = _corrections(previous, chunk, pinned)
    progress = (previous or "").partition("\n" + CORRECTIONS)[0].strip()
    lines = [progress] if progress else ["## Progress"]
    for item in chunk:
        first = message_text(item.message).strip().splitlines()[:1]
        text = first[0][:120] if first else ""
        lines.append(f"- [e{item.seq}] {item.message.get('role')}: {text}")
    summary = "\n".join(lines)
    if len(summary) > max_chars:  # keep the head (goal) and the newest lines
        summary = summary[: max_chars // 4] + "\n...\n" + summary[-(max_chars * 3 // 4) :]
    if corrections:
        summary += f"\n{CORRECTIONS}\n" + "\n".join(
            f"- {key}: {value} (replaces {old} stated in e{origin}; corrected in e{seq})"
            for key, (value, old, origin, seq) in sorted(corrections.items())
        )
    return summary


def bounded_summary(
    previous: str | None, chunk: Sequence[Item], pinned: Sequence[Item], cap: int | None, count: Callable[[str], int]
) -> str:
    """`extractive_summary` no longer than `cap` tokens (None: its own character bound): the proxy
    commits no longer summary (`proxy.compaction` asks once more, shorter, then rejects)."""
    max_chars = STAND_IN_MAX_CHARS
    summary = extractive_summary(previous, chunk, max_chars, pinned)
    while cap is not None and max_chars > 200 and (size := count(summary)) > cap:
        max_chars = int(max_chars * cap / size * 0.95)
        summary = extractive_summary(previous, chunk, max_chars, pinned)
    return summary


@dataclass
class TurnStat:
    turn: int
    events: int
    client_tokens: int
    sent_tokens: int
    compacted: bool
    trimmed: int
    pruned: int
    reuse_tokens: int
    baseline_reuse_tokens: int
    error: str | None = None
    blocks: tuple[tuple[int, int], ...] = ()
    """what was sent, for pricing (`bench.money`): (hash of the prefix through the block, its
    tokens) for the tools + framing, then each message"""
    summary_at: int | None = None
    """index in `blocks` of the summary block, when one is sent"""
    point_at: int | None = None
    """index in `blocks` of the projection's cache point (`Projection.cache_point`), if any"""
    previous_at: int | None = None
    """index in `blocks` of its previous point (`Projection.previous_point`), if any"""
    output_tokens: int = 0
    """the reply's tokens (the transcript's assistant message)"""
    summarizer_calls: tuple[tuple[int, int], ...] = ()
    """(input, output) tokens of each summarizer call the compaction after this request made"""
    shared_calls: tuple[tuple[int, int, int], ...] = ()
    """the same compactions in `summarizer.mode: shared`: (index in `ReplayReport.turns` of the
    request repeated, the ask's tokens, the summary's tokens) per shared call"""
    shared_fallback: tuple[tuple[int, int], ...] = ()
    """... and the own summarizer's calls of those that could not be shared"""
    kept: bool = False
    """whether the proxy would keep this request for a shared summary (`proxy.last_sent.near_trigger`
    on the projection record its call record carries)"""


@dataclass
class ReplayReport:
    name: str
    window: int
    max_output: int
    turns: list[TurnStat] = field(default_factory=list)
    compactions: int = 0
    summary: str | None = None
    """the active summary after the last compaction (what the next request would carry)"""
    client_blocks: tuple[tuple[int, int], ...] = ()
    """the client's whole conversation as `TurnStat.blocks`; request k (its `events`) sent the
    first `prefix_blocks + events` of them"""
    prefix_blocks: int = 0
    mode: SummaryMode = "text"
    """how the policy's compactions ask for their summary (`Summarizer.resolved`): `shared`, each
    turn's `shared_calls` and `shared_fallback` are what the proxy would send; `text`, its
    `summarizer_calls`"""

    @property
    def client_total(self) -> int:
        return sum(t.client_tokens for t in self.turns)

    @property
    def sent_total(self) -> int:
        return sum(t.sent_tokens for t in self.turns)

    @property
    def savings(self) -> float:
        return 1 - self.sent_total / self.client_total if self.client_total else 0.0

    @property
    def max_sent(self) -> int:
        return max((t.sent_tokens for t in self.turns), default=0)

    @property
    def over_window(self) -> int:
        """Requests sent although they (with the output reserve) exceed the window."""
        return sum(1 for t in self.turns if not t.error and t.sent_tokens + self.max_output > self.window)

    @property
    def refused(self) -> int:
        """Requests answered with the 400 instead: what cannot be cut (system prefix, tools, pins,
        summary, newest user message) alone exceeds the window."""
        return sum(1 for t in self.turns if t.error)

    @property
    def reuse_share(self) -> float:
        """Share of sent tokens that repeat the previous request's prefix (prompt-cache hits)."""
        sent = sum(t.sent_tokens for t in self.turns[1:])
        return sum(t.reuse_tokens for t in self.turns[1:]) / sent if sent else 0.0

    @property
    def baseline_reuse_share(self) -> float:
        client = sum(t.client_tokens for t in self.turns[1:])
        return sum(t.baseline_reuse_tokens for t in self.turns[1:]) / client if client else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "window": self.window,
            "turns": len(self.turns),
            "client_tokens": self.client_total,
            "sent_tokens": self.sent_total,
            "savings": round(self.savings, 4),
            "max_request": self.max_sent,
            "requests_over_window": self.over_window,
            "requests_refused": self.refused,
            "compactions": self.compactions,
            "summarizer_mode": self.mode,
            "prefix_reuse": round(self.reuse_share, 4),
            "baseline_prefix_reuse": round(self.baseline_reuse_share, 4),
        }


def _shared_prefix_tokens(previous: list[Message], current: list[Message], count: Callable[[Message], int]) -> int:
    total = 0
    for old, new in zip(previous, current, strict=False):
        if old != new:
            break
        total += count(new)
    return total


def _digest(message: Message) -> int:
    return hash(json.dumps(message, sort_keys=True, default=str))


def _blocks(
    messages: Sequence[Message], fixed: int, count: Callable[[Message], int], known: dict[int, int]
) -> tuple[tuple[tuple[int, int], ...], int | None]:
    """(`TurnStat.blocks`, index of the summary block or None). `known`: id -> digest of the
    client's own message objects (a projection sends them as they are)."""
    h = hash(("tools", fixed))
    out = [(h, fixed)]
    summary_at = None
    for message in messages:
        key = known.get(id(message))
        if key is None:
            key = _digest(message)
            content = message.get("content")
            if isinstance(content, str) and content.startswith(SUMMARY_HEAD):
                summary_at = len(out)
        h = hash((h, key))
        out.append((h, count(message)))
    return tuple(out), summary_at


def replay(
    messages: list[Message],
    tools: list[Any] | None,
    policy: Policy,
    model: str,
    projector: Projector,
    summarize: Summarize | None = None,
    name: str = "",
) -> ReplayReport:
    """`summarize` None: the deterministic stand-in (`extractive_summary`) with the pinned items."""
    prefix, history = identify.split_prefix(messages)
    counter = projector.counter(model)
    body: dict[str, Any] = {"model": model}
    if tools:
        body["tools"] = tools
    config = policy
    budget, _ = projector.budget(policy, model, body, counter)
    report = ReplayReport(name, budget.context_window, budget.max_output_tokens, mode=policy.summarizer.resolved())
    hashes = identify.chain("replay", history)
    items = projector.items(history, hashes, counter)
    pinned = tuple(pinned_items(items, policy.pins))
    calls: list[tuple[int, int]] = []
    cap = budget.summary_max_tokens

    def summarizer(previous: str | None, chunk: Sequence[Item]) -> str:
        prior, carried = split(previous or "")  # the summarizer sees no key lines (`policies.key_lines`)
        share = policy.summarizer.key_lines_share
        section = key_lines_section(carried, chunk, section_budget(cap or 0, share), counter.count_text)
        reserved = counter.count_text(section) if section else 0
        own = summarize or partial(
            bounded_summary, pinned=pinned, cap=cap - reserved if cap else None, count=counter.count_text
        )
        summary = own(prior or None, chunk)
        request = build_summary_messages(prior or None, chunk, pinned)
        calls.append((sum(counter.count(m) for m in request), counter.count_text(summary)))
        return joined(summary, section)

    known = {id(m): _digest(m) for m in (*prefix, *history)}
    report.client_blocks = _blocks([*prefix, *history], budget.fixed_tokens, counter, known)[0]
    report.prefix_blocks = 1 + len(prefix)
    checkpoint: Checkpoint | None = None
    previous_sent: list[Message] = []
    previous_client: list[Message] = []

    shared: list[tuple[int, int, int]] = []
    fallback: list[tuple[int, int]] = []

    def compact(plan: CompactionPlan, answered: int | None) -> Checkpoint:
        """Apply `plan`; `answered`: the index of the last request answered before it."""
        made = len(calls)
        summary = fold_summaries(plan, checkpoint.summary if checkpoint else None, summarizer)
        report.compactions += 1
        report.summary = summary
        ask = counter.count({"role": "user", "content": shared_ask(boundary_of(items, plan.through_seq), cap)})
        last = report.turns[answered] if answered is not None else None
        room = budget.context_window - budget.max_output_tokens
        if (
            answered is not None
            and last is not None
            and plan.through_seq <= last.events
            and last.sent_tokens + ask <= room
            and last.kept  # the proxy kept it (`proxy.last_sent`)
        ):
            shared.append((answered, ask, counter.count_text(summary)))
        else:
            fallback.extend(calls[made:])
        return next_checkpoint(checkpoint, plan, summary, counter)

    def answered_before(turns: int) -> int | None:
        """The newest of the first `turns` requests that was answered (not refused)."""
        return next((k for k in range(turns - 1, -1, -1) if not report.turns[k].error), None)

    for index, message in enumerate(history):
        if message.get("role") != "assistant" or index == 0:
            continue
        request_items = items[:index]
        client = [*prefix, *history[:index]]
        client_tokens = (
            budget.fixed_tokens + sum(counter.count(m) for m in prefix) + sum(i.tokens for i in request_items)
        )
        stat = TurnStat(len(report.turns) + 1, index, client_tokens, 0, False, 0, 0, 0, 0)
        calls.clear()
        shared.clear()
        fallback.clear()
        before = answered_before(len(report.turns))
        try:
            projection = project(prefix, request_items, checkpoint, budget, config, counter)
            plan = projection.record.compaction
            overflowing = bool(projection.record.pruned_seqs) and policy.on_overflow == "wait"
            if plan is not None and (plan.wait or overflowing):
                checkpoint = compact(plan, before)
                stat.compacted = True
                projection = project(prefix, request_items, checkpoint, budget, config, counter)
                plan = projection.record.compaction
        except ContextOverflow as exc:
            stat.error = str(exc)
            stat.summarizer_calls = tuple(calls)
            stat.shared_calls, stat.shared_fallback = tuple(shared), tuple(fallback)
            report.turns.append(stat)
            continue
        sent = projection.messages
        stat.sent_tokens = projection.record.sent_tokens
        stat.trimmed = len(projection.record.trimmed)
        stat.pruned = len(projection.record.pruned_seqs)
        stat.reuse_tokens = _shared_prefix_tokens(previous_sent, sent, counter)
        stat.baseline_reuse_tokens = _shared_prefix_tokens(previous_client, client, counter)
        stat.blocks, stat.summary_at = _blocks(sent, budget.fixed_tokens, counter, known)
        stat.point_at = None if projection.cache_point is None else projection.cache_point + 1  # after tools
        stat.previous_at = None if projection.previous_point is None else projection.previous_point + 1
        stat.output_tokens = counter.count(message)
        stat.kept = near_trigger(projection.record.summary_dict())
        report.turns.append(stat)
        previous_sent, previous_client = sent, client
        if plan is not None:  # the background job lands before the next request
            checkpoint = compact(plan, before)  # it starts beside this request, before its answer
            stat.compacted = True
        stat.summarizer_calls = tuple(calls)
        stat.shared_calls, stat.shared_fallback = tuple(shared), tuple(fallback)
        calls.clear()
    return report


def load_transcript(path: str) -> tuple[list[Message], list[Any] | None, str]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if isinstance(data, list):
        return data, None, path
    return data["messages"], data.get("tools"), str(data.get("name") or path)


def render_report(report: ReplayReport, per_turn: bool) -> str:
    lines = []
    if per_turn:
        lines.append("turn  events  client_tokens  sent_tokens  trimmed  pruned  compacted")
        for t in report.turns:
            lines.append(
                f"{t.turn:>4}  {t.events:>6}  {t.client_tokens:>13,}  {t.sent_tokens:>11,}  {t.trimmed:>7}  "
                f"{t.pruned:>6}  {'yes' if t.compacted else ''}{'  ERROR ' + t.error if t.error else ''}"
            )
    d = report.to_dict()
    lines.append(
        f"{report.name}: {d['turns']} requests, client {d['client_tokens']:,} tokens -> sent {d['sent_tokens']:,} "
        f"({d['savings']:.1%} saved); max request {d['max_request']:,} of window {report.window:,} "
        f"(output reserve {report.max_output:,}); {d['requests_over_window']} over window; "
        f"{d['compactions']} compactions ({report.mode} summaries); prefix reuse {d['prefix_reuse']:.1%} "
        f"(without ctxproxy {d['baseline_prefix_reuse']:.1%})"
    )
    return "\n".join(lines)

"""Hypothesis strategies and test doubles for the policy tests.

`histories()` draws valid-looking agent histories with the awkward parts real transcripts have:
parallel tool calls, reused tool_call ids across turns, `content: None`, empty and 30k+ char
results, list content with images, missing results, orphan results. `fake_count` is a cheap
deterministic token counter (tiktoken is exercised in the transcript and token tests).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from policies.base import Budget, Checkpoint, Item, Message
from policies.config import PinsConfig, PolicyConfig, ToolResultsConfig, ToolRule
from policies.draft import pass_through_tokens
from policies.fit_latest import cut_result
from policies.groups import Group, effective_boundary, group_items, last_index, render_group
from policies.pins import latest_user_seq, pinned_seqs, release_pins
from policies.prune_groups import pruned_marker
from policies.summary_prompt import summary_block
from policies.text import content_text, non_text_parts

TOOL_NAMES = ("bash", "read_file", "search", "edit")
RULES = (
    (),
    (),
    (ToolRule("read_file", keep_last_n=1),),
    (ToolRule("search", "trim", max_chars=200), ToolRule("ba*", "keep")),
    (ToolRule("*", "trim"),),
    (ToolRule("edit", max_chars=1200), ToolRule("read_*", "type-aware", max_chars=50, keep_last_n=2)),
)
"""per-tool rules a policy may draw (`ToolResultsConfig.rules`); none in a third of them"""
SIZES = (0, 12, 200, 900, 3000, 9000, 32000)


def fake_count(message: Message) -> int:
    return 4 + len(json.dumps(message, sort_keys=True)) // 4


def make_text(tag: str, size: int) -> str:
    if size == 0:
        return ""
    line = f"{tag}: the quick brown fox jumps over the lazy dog 0123456789\n"
    return (line * (size // len(line) + 1))[:size]


def to_items(messages: Sequence[Message], count: Any = fake_count) -> list[Item]:
    return [Item(index + 1, message, count(message)) for index, message in enumerate(messages)]


@st.composite
def user_message(draw: st.DrawFn, turn: int) -> dict[str, Any]:
    size = draw(st.sampled_from((5, 40, 300, 2000)))
    text = f"request {turn}: " + make_text(f"user{turn}", size)
    if draw(st.integers(0, 9)) == 0:
        text += " You MUST keep the public API stable."
    if draw(st.integers(0, 7)) == 0:
        return {
            "role": "user",
            "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": "https://example.com/screen.png"}},
            ],
        }
    return {"role": "user", "content": text}


def file_version(version: int, size: int) -> str:
    """The text of `src/app.py` at `version`: the same file each time, a line or two changed
    (an agent re-reading a file it edits: exact repeats and near-repeats of earlier reads)."""
    lines = [f"{n:4d}  def step_{n}(value): return value * {n}  # the quick brown fox" for n in range(size // 60 + 1)]
    for edit in range(version):
        lines[(edit * 7) % len(lines)] = f"{edit:4d}  EDITED in version {edit + 1}: return None"
    return "\n".join(lines)


@st.composite
def tool_group(draw: st.DrawFn, turn: int) -> list[dict[str, Any]]:
    ids = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True))
    rereads = {i: draw(st.integers(0, 2)) for i in ids if draw(st.integers(0, 3)) == 0}  # id -> file version
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {
                "name": "read_file" if i in rereads else draw(st.sampled_from(TOOL_NAMES)),
                "arguments": json.dumps(
                    {"path": "src/app.py"} if i in rereads else {"command": f"step {turn} call {i}"}
                ),
            },
        }
        for i in ids
    ]
    content = draw(st.sampled_from((None, "", f"calling tools for turn {turn}")))
    messages: list[dict[str, Any]] = [{"role": "assistant", "content": content, "tool_calls": calls}]
    results = [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": (
                file_version(rereads[int(call["id"][5:])], 3000)
                if int(call["id"][5:]) in rereads
                else make_text(f"out{turn}.{call['id']}", draw(st.sampled_from(SIZES)))
            ),
        }
        for call in calls
    ]
    if draw(st.booleans()):
        results.reverse()
    if len(results) > 0 and draw(st.integers(0, 11)) == 0:
        results.pop(draw(st.integers(0, len(results) - 1)))  # a result never recorded
    if draw(st.integers(0, 14)) == 0:
        results.append({"role": "tool", "tool_call_id": f"ghost_{turn}", "content": "stray output"})
    return messages + results


@st.composite
def histories(draw: st.DrawFn, min_groups: int = 1, max_groups: int = 24) -> list[dict[str, Any]]:
    """Messages after the prefix; always starts with a user message."""
    n = draw(st.integers(min_groups, max_groups))
    messages: list[dict[str, Any]] = [draw(user_message(0))]
    for turn in range(1, n):
        kind = draw(st.sampled_from(("user", "assistant", "tools", "tools", "tools", "orphan")))
        messages.extend(draw(group_of(kind, turn)))
    return messages


@st.composite
def group_of(draw: st.DrawFn, kind: str, turn: int) -> list[dict[str, Any]]:
    if kind == "user":
        return [draw(user_message(turn))]
    if kind == "assistant":
        return [{"role": "assistant", "content": make_text(f"answer{turn}", draw(st.sampled_from((3, 400))))}]
    if kind == "orphan" and draw(st.integers(0, 3)) == 0:
        return [{"role": "tool", "tool_call_id": "call_1", "content": "orphan output"}]
    return list(draw(tool_group(turn)))


prefixes = st.sampled_from(
    (
        [],
        [{"role": "system", "content": "You are a careful coding agent."}],
        [
            {"role": "system", "content": "You are a careful coding agent. " + make_text("sys", 1200)},
            {"role": "developer", "content": "Prefer small diffs."},
        ],
    )
)


@st.composite
def budgets(draw: st.DrawFn) -> Budget:
    window = draw(st.sampled_from((1500, 4000, 16000, 64000, 200000)))
    output = draw(st.sampled_from((100, 1000)))
    return Budget(window, min(output, window // 2), draw(st.sampled_from((0, 300))))


@st.composite
def configs(draw: st.DrawFn) -> PolicyConfig:
    old = draw(st.sampled_from((0, 100, 400)))
    trigger, target = draw(st.sampled_from(((0.8, 0.5), (0.6, 0.3), (1.0, 0.7))))
    return PolicyConfig(
        trigger=trigger,
        target=target,
        keep_recent_tokens=draw(st.sampled_from((0, 500, 20000))),
        tool_results=ToolResultsConfig(
            keep_recent_groups=draw(st.integers(0, 5)),
            recent_max_chars=draw(st.sampled_from((max(old, 1000), 8000))),
            old_max_chars=old,
            head_ratio=draw(st.sampled_from((0.5, 0.7, 1.0))),
            exclude_tools=draw(st.sampled_from(((), ("search",)))),
            clear_at_least=draw(st.integers(1, 5)),
            rules=draw(st.sampled_from(RULES)),
        ),
        pins=PinsConfig(
            first_user=draw(st.booleans()),
            roles=draw(st.sampled_from(((), ("user",)))),
            patterns=draw(st.sampled_from(((), (r"\bMUST\b",)))),
        ),
        summary_chunk_tokens=draw(st.sampled_from((300, 24000))),
        order=draw(
            st.sampled_from(
                (
                    ("trim_tool_results", "summary_tail", "prune_groups"),
                    ("summary_tail", "trim_tool_results", "prune_groups"),
                    ("prune_groups",),
                )
            )
        ),
    )


@st.composite
def checkpoints(draw: st.DrawFn, n_items: int) -> Checkpoint | None:
    if n_items == 0 or draw(st.booleans()):
        return None
    summary = "## Goal\nkeep going\n" + make_text("summary", draw(st.sampled_from((10, 500, 3000))))
    covered = draw(st.integers(0, n_items))
    return Checkpoint(draw(st.integers(1, 9)), covered, summary, fake_count(summary_block(summary, covered)))


@dataclass
class Case:
    prefix: list[Any]
    messages: list[dict[str, Any]]
    items: list[Item]
    checkpoint: Checkpoint | None
    budget: Budget
    config: PolicyConfig


@st.composite
def cases(draw: st.DrawFn, max_groups: int = 24) -> Case:
    prefix = draw(prefixes)
    messages = draw(histories(max_groups=max_groups))
    items = to_items(messages)
    return Case(prefix, messages, items, draw(checkpoints(len(items))), draw(budgets()), draw(configs()))


def kept_pins(case: Case) -> set[int]:
    """The pins the projection keeps: the rule pins beyond the first and the newest user message
    are released oldest first once together they take more than half the input budget."""
    pins = case.config.pins
    pinned = pinned_seqs(case.items, pins)
    latest = latest_user_seq(case.items)
    first = next((item.seq for item in case.items if item.message.get("role") == "user"), None)
    always = frozenset(seq for seq in (first if pins.first_user else None, latest) if seq is not None)
    tokens = {item.seq: item.tokens for item in case.items}
    kept, _ = release_pins(pinned, always, lambda seq: tokens[seq], case.budget.input_budget // 2)
    return set(kept)


def irreducible_group(group: Group, is_last: bool, head_ratio: float, count: Any = fake_count) -> int:
    """Tokens of a kept group when nothing of it can be dropped: the in-flight tool group's
    results reduced to their markers where that is smaller (`fit_latest`), others as rendered."""
    total = 0
    for seq, message in render_group(group, is_last=is_last):
        tokens = count(message)
        content = message.get("content")
        if (
            is_last
            and seq is not None
            and message.get("role") == "tool"
            and (content_text(content) or non_text_parts(content))
        ):
            name = group.tool_name(str(message.get("tool_call_id", "")))
            cut, _ = cut_result(message, tokens=tokens, max_chars=0, head_ratio=head_ratio, tool_name=name, seq=seq)
            tokens = min(tokens, count(cut))
        total += tokens
    return total


def applied(case: Case, count: Any = fake_count) -> Case:
    """`case` as the projection sees it: without its checkpoint while the whole history, as sent,
    is within `late_trim`'s pass-through, when that is above the trigger (the checkpoint is
    deferred, `StepContext.deferred`)."""
    if case.checkpoint is None or case.config.late_trim <= case.config.trigger:
        return case
    as_sent = case.budget.fixed_tokens + sum(count(m) for m in case.prefix) + sum(i.tokens for i in case.items)
    if as_sent <= pass_through_tokens(case.config, case.budget):
        return replace(case, checkpoint=None)
    return case


def mandatory_tokens(case: Case, count: Any = fake_count) -> int:
    """What the request costs after every droppable group is gone (a marker naming them in their
    place) and the in-flight results are cut to their markers (the strategies only pin user
    messages, which are single-message groups, so nothing else kept can be cut)."""
    case = applied(case, count)
    groups = group_items(case.items)
    covered = effective_boundary(groups, case.checkpoint)
    keep = kept_pins(case)
    latest = latest_user_seq(case.items)
    if latest is not None:
        keep.add(latest)
    total = case.budget.fixed_tokens + sum(count(m) for m in case.prefix)
    if case.checkpoint is not None and covered > 0:
        total += count(summary_block(case.checkpoint.summary, covered))
    last = last_index(groups)
    dropped: list[int] = []
    for index, group in enumerate(groups):
        is_last = index == last
        if group.kind == "orphan":
            continue
        if not (is_last or keep & set(group.seqs)):
            if group.first_seq > covered:
                dropped.extend(group.seqs)
            continue
        total += irreducible_group(group, is_last, case.config.tool_results.head_ratio, count)
    if dropped:
        total += count(pruned_marker(dropped))
    return total


def expected_head(case: Case) -> tuple[int, ...]:
    """Seqs of covered groups the projection must keep (pinned or newest user message)."""
    case = applied(case)
    groups = group_items(case.items)
    covered = effective_boundary(groups, case.checkpoint)
    keep = kept_pins(case)
    latest = latest_user_seq(case.items)
    if latest is not None:
        keep.add(latest)
    return tuple(
        sorted(
            seq
            for group in groups
            if group.kind != "orphan" and group.last_seq <= covered and keep & set(group.seqs)
            for seq in group.seqs
        )
    )


def fake_summarize(previous: str | None, chunk: Sequence[Item], max_chars: int = 1200) -> str:
    """Deterministic stand-in for the summarizer: the first line of each event, bounded."""
    lines = [previous.strip()] if previous else ["## Goal", "continue the task", "## Key facts"]
    for item in chunk:
        content = item.message.get("content")
        text = content if isinstance(content, str) else ""
        first = text.strip().splitlines()[0][:80] if text.strip() else str(item.message.get("role"))
        lines.append(f"- [e{item.seq}] {first}")
    summary = "\n".join(lines)
    if len(summary) > max_chars:
        summary = summary[:200] + "\n...\n" + summary[-(max_chars - 205) :]
    return summary

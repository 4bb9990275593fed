"""Named checkers for DESIGN's invariants 1-5; each returns a list of violations (empty = ok).

Problem: every policy, and every combination of them, must keep the request valid. The checks
live here once and are used by the tests, on every projection they generate (the proxy itself
does not run them).

1. `tool_pairing` — an assistant message with `tool_calls` is followed by results for exactly
   those ids before the next non-tool message; no orphan results. A trailing tool group may be
   incomplete (in flight: there is no next message yet).
2. `prefix_pinned` — the system/developer prefix is sent first, unchanged.
3. `latest_turn_verbatim` — the newest user message and the in-flight (last) tool group of the
   client's history appear unchanged, the group at the very end; the one exception: a result of
   that group cut to fit (`fit_latest`), which keeps its id and other keys, and whose text is a
   head of the original, the marker naming the event, then a tail of the original.
4. `coverage` — every item is covered by the effective checkpoint boundary, sent, pruned (recorded)
   or a dropped orphan (recorded): exactly one of them, except pinned items, which may be covered
   and sent.
5. `within_budget` — projected input tokens fit the input budget; `pruned_marked` — a request
   that dropped events carries the marker naming each of them (never a silent drop).
6. `repeats_lossless` — every result sent as a repeat or near-repeat marker gives back exactly
   its original text from the events it names (`repeats.reconstruct`, what recall reads).

Example::

    tool_pairing([{"role": "tool", "tool_call_id": "x", "content": "hi"}])
    # ['message 0: tool result for "x" without a matching tool call before it']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from policies.base import Budget, Checkpoint, Item, Message
from policies.fit_latest import FIT_MARKER_START
from policies.groups import group_items, last_index, split_prefix
from policies.outcome import Projection, ProjectionRecord
from policies.prune_groups import PRUNED_MARKER_START
from policies.repeats import MARKER_STARTS, marker_event, reconstruct
from policies.text import content_text, tool_call_ids


def tool_pairing(messages: Sequence[Message]) -> list[str]:
    """Invariant 1 over the messages to send."""
    violations: list[str] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        role = message.get("role")
        if role == "tool":
            tid = message.get("tool_call_id")
            violations.append(f'message {index}: tool result for "{tid}" without a matching tool call before it')
            index += 1
            continue
        index += 1
        ids = tool_call_ids(message) if role == "assistant" else []
        if not ids:
            continue
        expected = Counter(ids)
        if len(expected) != len(ids):
            violations.append(f"message {index - 1}: duplicate tool call ids {sorted(ids)}")
        while index < len(messages) and messages[index].get("role") == "tool":
            tid = messages[index].get("tool_call_id")
            if isinstance(tid, str) and expected[tid] > 0:
                expected[tid] -= 1
            else:
                violations.append(f'message {index}: tool result for "{tid}" does not answer the preceding tool calls')
            index += 1
        missing = sorted(tid for tid, n in expected.items() if n > 0)
        if missing and index < len(messages):
            violations.append(f"message {index}: tool calls {missing} have no result before it")
    return violations


def prefix_pinned(prefix: Sequence[Message], messages: Sequence[Message]) -> list[str]:
    """Invariant 2: `messages` starts with exactly `prefix`."""
    if list(messages[: len(prefix)]) != list(prefix):
        return ["the system/developer prefix is not sent first and unchanged"]
    return []


def latest_turn_verbatim(original_history: Sequence[Message], messages: Sequence[Message]) -> list[str]:
    """Invariant 3: `original_history` is what the client sent (prefix optional)."""
    violations: list[str] = []
    _, history = split_prefix(original_history)
    latest_user = next((m for m in reversed(history) if m.get("role") == "user"), None)
    if latest_user is not None and latest_user not in messages:
        violations.append("the newest user message is not sent verbatim")
    if history and history[-1].get("role") == "user" and messages and messages[-1] != history[-1]:
        violations.append("the newest user message ends the history but is not the last message sent")
    groups = group_items([Item(seq + 1, message, 0) for seq, message in enumerate(history)])
    last = last_index(groups)
    if last >= 0 and groups[last].kind == "tool_call":
        group = groups[last].items
        sent = list(messages[len(messages) - len(group) :])
        if len(sent) != len(group) or not all(
            message == item.message or is_cut_to_fit(item.message, message, item.seq)
            for item, message in zip(group, sent, strict=True)
        ):
            violations.append("the in-flight tool group is not sent verbatim at the end (nor cut to fit)")
    return violations


def is_cut_to_fit(original: Message, sent: Message, seq: int) -> bool:
    """Whether `sent` is the tool result `original` (event `seq`) cut head + tail to fit: the
    same keys but content, and text = a head of the original, the fit marker naming the event
    (alone on its line), a tail of the original."""
    if original.get("role") != "tool" or {k: v for k, v in sent.items() if k != "content"} != {
        k: v for k, v in original.items() if k != "content"
    }:
        return False
    text, content = content_text(original.get("content")), sent.get("content")
    if not isinstance(content, str):
        return False
    start = content.find(FIT_MARKER_START)
    end = content.find("]", start)
    if start < 0 or end < 0 or (start > 0 and content[start - 1] != "\n"):
        return False
    marker = content[start : end + 1]
    if f"; event {seq}" not in marker or f"({len(text):,} chars)" not in marker:
        return False
    head, tail = content[: max(start - 1, 0)], content[end + 2 :]
    if end + 1 < len(content) and content[end + 1] != "\n":
        return False
    return text.startswith(head) and text.endswith(tail) and len(head) + len(tail) <= len(text)


def coverage(items: Sequence[Item], checkpoint: Checkpoint | None, projection_record: ProjectionRecord) -> list[str]:
    """Invariant 4: every item covered or sent (or recorded as pruned / dropped orphan)."""
    record = projection_record
    violations: list[str] = []
    boundary = record.covered_through_seq
    if checkpoint is None and boundary != 0:
        violations.append(f"no checkpoint, yet the record claims coverage through e{boundary}")
    if checkpoint is not None and boundary > checkpoint.covered_through_seq:
        violations.append(
            f"record covers through e{boundary}, beyond the checkpoint (e{checkpoint.covered_through_seq})"
        )
    sent = set(record.sent_seqs)
    pinned = set(record.pinned_seqs)
    accounted = set(record.pruned_seqs) | set(record.orphan_seqs)
    known = {item.seq for item in items}
    for seq in sorted(sent - known):
        violations.append(f"e{seq} is sent but is not an item of the branch")
    for item in items:
        seq = item.seq
        covered = seq <= boundary
        places = int(covered) + int(seq in sent) + int(seq in accounted)
        if covered and seq in sent and seq in pinned:
            places -= 1
        if places == 0:
            violations.append(f"e{seq} is neither covered by the checkpoint nor sent nor recorded as dropped")
        elif places > 1:
            violations.append(f"e{seq} is both covered by the checkpoint and sent (or dropped)")
    return violations


def within_budget(tokens: int, budget: Budget) -> list[str]:
    """Invariant 5: `tokens` (fixed + messages) fit the input budget."""
    if tokens > budget.input_budget:
        return [
            f"projection needs {tokens:,} tokens; input budget is {budget.input_budget:,} "
            f"(window {budget.context_window:,} − max output {budget.max_output_tokens:,})"
        ]
    return []


def pruned_marked(messages: Sequence[Message], projection_record: ProjectionRecord) -> list[str]:
    """Invariant 5's last clause: every pruned event is named by the marker that is sent."""
    pruned = projection_record.pruned_seqs
    if not pruned:
        return []
    markers = [text for text in map(content_text, (m.get("content") for m in messages)) if PRUNED_MARKER_START in text]
    if len(markers) != 1:
        return [f"{len(pruned)} events pruned, {len(markers)} markers sent (expected one)"]
    named: set[int] = set()
    head = markers[0].split('events="', 1)[-1].split('"', 1)[0]
    for part in head.split(", "):
        first, _, last = part.partition("-")
        if first.startswith("e") and (not last or last.startswith("e")):
            named.update(range(int(first[1:]), int((last or first)[1:]) + 1))
    missing = sorted(set(pruned) - named)
    return [f"pruned events not named by the marker: {missing[:10]}"] if missing else []


def repeats_lossless(items: Sequence[Item], messages: Sequence[Message]) -> list[str]:
    """Invariant 6 over the messages sent for `items`."""
    texts = {
        item.seq: content_text(item.message.get("content")) for item in items if item.message.get("role") == "tool"
    }
    violations: list[str] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "tool" or not isinstance(content, str) or not content.startswith(MARKER_STARTS):
            continue
        seq = marker_event(content)
        if seq is None or seq not in texts:
            violations.append(f"message {index}: a repeat marker names no stored result of its own")
        elif reconstruct(content, texts.get) != texts[seq]:
            violations.append(f"message {index}: the repeat marker of e{seq} does not give back its text")
    return violations


def check_all(
    prefix: Sequence[Message],
    items: Sequence[Item],
    checkpoint: Checkpoint | None,
    budget: Budget,
    projection: Projection,
) -> list[str]:
    """Every invariant on one projection; violations prefixed with the invariant's name."""
    messages = projection.messages
    history = [item.message for item in items]
    checks = {
        "tool_pairing": tool_pairing(messages),
        "prefix_pinned": prefix_pinned(prefix, messages),
        "latest_turn_verbatim": latest_turn_verbatim(history, messages),
        "coverage": coverage(items, checkpoint, projection.record),
        "within_budget": within_budget(projection.record.sent_tokens, budget),
        "pruned_marked": pruned_marked(messages, projection.record),
        "repeats_lossless": repeats_lossless(items, messages),
    }
    return [f"{name}: {violation}" for name, found in checks.items() for violation in found]

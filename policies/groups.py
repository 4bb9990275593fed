"""Split a history into the pinned prefix and protocol groups; every policy works on whole groups.

Problem: dropping or summarizing single messages breaks the tool protocol (an assistant
`tool_calls` message must be followed by exactly its results). So history is cut into groups:

- `user`: one user message;
- `assistant`: one assistant message without tool calls;
- `tool_call`: an assistant message with `tool_calls` plus the results that follow it
  (parallel calls stay together);
- `orphan`: a tool result with no matching call before it — its own group;
- `other`: anything else (a mid-conversation system message, legacy `function` role).

Invariants:
- Pairing is positional: a result belongs to the nearest preceding `tool_calls` message of the
  same run of tool messages, and each call id is consumed once. Real transcripts reuse ids
  (`call_0` in turn 3 and again in turn 9), so a global id map would pair wrongly.
- Orphans are never sent as role `tool` (upstreams reject them). The projection DROPS them and
  lists their seqs in `ProjectionRecord.orphan_seqs`; the summarizer still sees them as data.
- A `tool_call` group with missing results is sent whole as is when it is the last group (in
  flight: the client sent the call without results yet). Anywhere else each missing id gets a
  synthetic result `{"role": "tool", "tool_call_id": id, "content": "[no result recorded]"}`,
  deterministic, after the recorded ones, in call order.

Example: seqs 1 user, 2 assistant(tool_calls a, b), 3 tool(a), 4 tool(x), 5 user ->
groups [user(1)], [tool_call(2, 3) missing b], [orphan(4)], [user(5)]; rendered:
user, assistant, tool(a), tool(b: "[no result recorded]"), user.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from policies.base import Checkpoint, Item, Message
from policies.text import call_name, tool_calls

GroupKind = Literal["user", "assistant", "tool_call", "orphan", "other"]
NO_RESULT = "[no result recorded]"
PREFIX_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Group:
    """Derived values (`seqs`, `last_seq`, `tokens`, `messages`, `item_tokens`) are computed once,
    when the group is made, into slots (no per-instance dict: the caches hold a group per message
    or call of every conversation in use)."""

    kind: GroupKind
    items: tuple[Item, ...]
    missing_ids: tuple[str, ...] = ()
    seqs: tuple[int, ...] = field(init=False, repr=False, compare=False)
    last_seq: int = field(init=False, repr=False, compare=False)
    tokens: int = field(init=False, repr=False, compare=False)
    messages: tuple[Message, ...] = field(init=False, repr=False, compare=False)
    """The items' messages, in order (what `render_group` sends when nothing is repaired)."""
    item_tokens: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _derive(self)

    @property
    def first_seq(self) -> int:
        return self.items[0].seq

    def tool_name(self, tool_call_id: str) -> str:
        """Name of the function whose call produced `tool_call_id` in this group."""
        if self.kind != "tool_call":
            return "unknown"
        for call in tool_calls(self.items[0].message):
            if call.get("id") == tool_call_id:
                return call_name(call)
        return "unknown"


def split_prefix(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """Leading system/developer messages, then the rest."""
    index = 0
    while index < len(messages) and messages[index].get("role") in PREFIX_ROLES:
        index += 1
    return list(messages[:index]), list(messages[index:])


def group_items(items: Sequence[Item]) -> list[Group]:
    """Protocol groups of `items`, oldest first (an orphan follows the group it interrupted)."""
    groups: list[Group] = []
    extend_groups(groups, items, 0)
    return groups


_SINGLE_KINDS: dict[str, GroupKind] = {"user": "user", "assistant": "assistant", "tool": "orphan"}
_new = object.__new__
_set = object.__setattr__


def _group(kind: GroupKind, items: tuple[Item, ...], missing_ids: tuple[str, ...] = ()) -> Group:
    """`Group(kind, items, missing_ids)` without the frozen dataclass `__init__` (half the cost
    on the hot path; the result is an ordinary, equal `Group`)."""
    group: Group = _new(Group)
    _set(group, "kind", kind)
    _set(group, "items", items)
    _set(group, "missing_ids", missing_ids)
    _derive(group)
    return group


def _derive(group: Group) -> None:
    items = group.items
    seqs: tuple[int, ...]
    messages: tuple[Message, ...]
    counts: tuple[int, ...]
    if len(items) == 1:
        item = items[0]
        seqs, messages, counts = (item.seq,), (item.message,), (item.tokens,)
    else:
        seqs = tuple(item.seq for item in items)
        messages = tuple(item.message for item in items)
        counts = tuple(item.tokens for item in items)
    _set(group, "seqs", seqs)
    _set(group, "last_seq", max(seqs))
    _set(group, "tokens", sum(counts))
    _set(group, "messages", messages)
    _set(group, "item_tokens", counts)


def extend_groups(groups: list[Group], items: Sequence[Item], start: int) -> None:
    """Append to `groups` the protocol groups of `items[start:]`; `start` must be 0 or the
    position of a non-tool item (the start of a run), so no earlier group is still open."""
    index = start
    n = len(items)
    append = groups.append
    single = _SINGLE_KINDS.get
    while index < n:
        item = items[index]
        message = item.message
        role = message.get("role")
        index += 1
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls and isinstance(calls, list):
                calls = [call for call in calls if type(call) is dict or isinstance(call, Mapping)]
            if not calls or not isinstance(calls, list):
                append(_group("assistant", (item,)))
                continue
            pending = [str(call.get("id", "")) for call in calls]  # = tool_call_ids(message)
            members = [item]
            orphans: list[Group] = []
            while index < n:
                result = items[index]
                result_message = result.message
                if result_message.get("role") != "tool":
                    break
                result_id = result_message.get("tool_call_id")
                if isinstance(result_id, str) and result_id in pending:
                    pending.remove(result_id)
                    members.append(result)
                else:
                    orphans.append(_group("orphan", (result,)))
                index += 1
            append(_group("tool_call", tuple(members), tuple(pending)))
            groups.extend(orphans)
        else:
            append(_group(single(role, "other") if isinstance(role, str) else "other", (item,)))


def synthetic_result(tool_call_id: str) -> dict[str, Any]:
    """The repair for a call whose result was never recorded."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": NO_RESULT}


def render_group(group: Group, *, is_last: bool) -> list[tuple[int | None, Message]]:
    """(seq, message) pairs to send for `group`; seq None marks a synthetic repair."""
    if group.kind == "orphan":
        return []
    rendered: list[tuple[int | None, Message]] = [(item.seq, item.message) for item in group.items]
    if group.missing_ids and not is_last:
        rendered.extend((None, synthetic_result(tid)) for tid in group.missing_ids)
    return rendered


def normalize_boundary(groups: Sequence[Group], seq: int) -> int:
    """Lower `seq` until no group straddles it, so coverage never splits a group.

    A boundary inside a group (first_seq <= seq < last_seq) is treated as covering through the
    group's start: the whole group stays raw (the summary may repeat a little of it; never the
    reverse, where part of a group would be neither summarized nor sent)."""
    boundary = seq
    while True:
        index = bisect_right(groups, boundary, key=_FIRST_SEQ) - 1
        # Only a multi-item (tool_call) group can straddle; between it and `index` there are
        # only the orphans of its own run (groups are ordered by first seq, runs are disjoint).
        while index >= 0 and groups[index].kind == "orphan":
            index -= 1
        if index < 0:
            break
        group = groups[index]
        if not group.first_seq <= boundary < group.last_seq:
            break
        boundary = group.first_seq - 1
    return max(boundary, 0)


_FIRST_SEQ = attrgetter("first_seq")


def group_index_of(groups: Sequence[Group], seq: int, firsts: Sequence[int] | None = None) -> int:
    """Index of the group holding item `seq` (-1 if none). `firsts`: the groups' first seqs, when
    the caller has them (they are strictly increasing, so this is a bisection)."""
    if firsts is not None:
        index = bisect_right(firsts, seq) - 1
    else:
        index = bisect_right(groups, seq, key=_FIRST_SEQ) - 1
    while index >= 0:
        group = groups[index]
        if group.first_seq == seq or (len(group.items) > 1 and seq in group.seqs):
            return index
        if group.kind != "orphan":  # only its own run's orphans sit between a group and seq
            return -1
        index -= 1
    return -1


def last_index(groups: Sequence[Group]) -> int:
    """Index of the latest turn: the last group that is not an orphan (-1 if none). Trailing
    orphans are dropped, so this group ends the projection."""
    for index in range(len(groups) - 1, -1, -1):
        if groups[index].kind != "orphan":
            return index
    return -1


def effective_boundary(groups: Sequence[Group], checkpoint: Checkpoint | None) -> int:
    """The seq through which `checkpoint` replaces raw history in this projection.

    Never splits a group, and never covers the last group (the latest turn is always sent raw):
    a checkpoint reaching into it is lowered to just before it."""
    last = last_index(groups)
    if checkpoint is None or last < 0:
        return 0
    boundary = min(checkpoint.covered_through_seq, groups[last].first_seq - 1)
    return normalize_boundary(groups, boundary)

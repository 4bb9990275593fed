"""cache_control markers: kept off the identity, put back on the blocks that are sent, capped at 4.

Native -> common: the markers are taken off the blocks and kept in the message's
`_cache_markers` key (block path + key position + value), which identity canonicalization
ignores: a client that moves its breakpoints every turn (Claude Code marks the newest message)
does not fork its conversation. Common -> native: they are put back, at the same key position,
on the blocks that are sent. If system + tools + messages would then carry more than the API's
4 (a request with 5 is a 400), the proxy's own markers go first, the oldest first
(`cap_own_markers`); the client's are never dropped. The proxy's are the one `EPHEMERAL` object
(a client's are parsed from its JSON, never that object), which is how the cap tells them apart.

The summary block: when the client uses prompt caching (any marker), the projection's
`<conversation_summary>` block gets a breakpoint of its own (`mark_summary`), so the prefix up to
the summary -- the same from one compaction to the next -- is read from the cache even when the
client's moving breakpoint (the newest message) is more than 20 blocks past a rewritten result.
Of the proxy's markers it is the oldest, so it is the first dropped over the 4.

The cache point: the last tool result trimmed as old (`Projection.cache_point`) gets one too
(`mark_point`). Trimming rewrites results when they turn old, every few turns; everything after
the client's previous breakpoints then differs, and without this one each such turn would read
only the system prompt from the cache and write the rest at 1.25x. The region through the point
keeps its bytes until the next move, so the move reads up to it (within the 20-block lookback of
the new point) and writes only the groups that turned old and the new turn. Groups of parallel
calls put more blocks than that between two points (4 groups of 3 calls: 28 blocks), so when the
previous point (`Projection.previous_point`) is more than `NEAR_LOOKBACK` blocks back it is marked
too, and the move reads through it.

Over the 4, the proxy's markers are worth, lowest first: the summary's (the point reads through
the summary anyway while they are within 20 blocks, and the summary is written once a compaction),
the previous point's (only a move reads through it), the point (every request between two moves
reads through it). That is their order in the messages, so the cap drops the oldest first.

Example: `{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}` as block 0 of a
user message becomes the block `{"type": "text", "text": "hi"}` and the marker
`{"path": [0], "index": 2, "cache_control": {"type": "ephemeral"}}`.
"""

from __future__ import annotations

from typing import Any

from policies.summary_prompt import SUMMARY_HEAD

from ... import identify
from ...types import Json, Message

MAX_CACHE_CONTROL = 4
LOOKBACK = 20
"""content blocks before a breakpoint where the API looks for a cache entry ("about 20")"""
NEAR_LOOKBACK = LOOKBACK - 4
"""blocks between the previous and the new cache point past which the previous one is marked too"""

MARKERS = identify.CACHE_MARKERS
"""Where a common message keeps its blocks' cache_control markers: a key identity
canonicalization ignores, so a client that moves its cache breakpoints from turn to turn (Claude
Code marks the newest message) still continues the same conversation instead of forking it."""


def pop_markers(blocks: list[Any], path: list[Any], found: list[dict[str, Any]]) -> list[Any]:
    """`blocks` without their cache_control keys (copies where one was removed); each marker is
    appended to `found` with its block path and key position, so it can be put back exactly."""
    out = []
    for k, block in enumerate(blocks):
        if isinstance(block, dict):
            block = pop_marker(block, [*path, k], found)
        out.append(block)
    return out


def pop_marker(block: dict[str, Any], path: list[Any], found: list[dict[str, Any]]) -> dict[str, Any]:
    if "cache_control" in block:
        keys = list(block)
        found.append({"path": path, "index": keys.index("cache_control"), "cache_control": block["cache_control"]})
        block = {k: v for k, v in block.items() if k != "cache_control"}
    content = block.get("content")
    if block.get("type") == "tool_result" and isinstance(content, list):
        stripped = pop_markers(content, [*path, "content"], found)
        if any(a is not b for a, b in zip(stripped, content, strict=True)):
            block = {**block, "content": stripped}
    return block


def _put_marker(value: Any, path: list[Any], index: int, marker: Any) -> Any:
    """A copy of `value` with `marker` put back at `path` (None when the block no longer exists)."""
    if not path:
        if not isinstance(value, dict):
            return None
        items = list(value.items())
        items.insert(min(index, len(items)), ("cache_control", marker))
        return dict(items)
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        if not isinstance(value, list) or head >= len(value):
            return None
        inner = _put_marker(value[head], rest, index, marker)
        return None if inner is None else [*value[:head], inner, *value[head + 1 :]]
    if not isinstance(value, dict) or head not in value:
        return None
    inner = _put_marker(value[head], rest, index, marker)
    return None if inner is None else {**value, head: inner}


def restore_markers(value: Any, markers: list[dict[str, Any]], prefix: list[Any]) -> Any:
    """`value` (blocks or a block) with the markers whose path starts with `prefix` put back."""
    n = len(prefix)
    for marker in markers:
        path = marker.get("path") or []
        if list(path[:n]) != prefix:
            continue
        updated = _put_marker(value, list(path[n:]), marker.get("index", 0), marker.get("cache_control"))
        if updated is not None:
            value = updated
    return value


def message_markers(message: Message) -> list[dict[str, Any]]:
    markers = message.get(MARKERS)
    return [m for m in markers if isinstance(m, dict) and "cache_control" in m] if isinstance(markers, list) else []


def _count_markers(value: Any) -> int:
    if isinstance(value, dict):
        own = 1 if value.get("cache_control") is not None else 0
        content = value.get("content")
        return own + (_count_markers(content) if isinstance(content, list) else 0)
    if isinstance(value, list):
        return sum(_count_markers(v) for v in value)
    return 0


def cache_markers(body: Json, messages: list[Json]) -> int:
    """cache_control markers of tools + system + messages (nested tool_result blocks too)."""
    total = _count_markers(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, list):
        total += _count_markers(system)
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            total += _count_markers(content)
    return total


EPHEMERAL = {"type": "ephemeral"}
"""the value of every breakpoint the proxy places (by identity: `cap_own_markers`)"""


def _strip_own(value: Any, excess: list[int]) -> Any:
    """A copy of blocks (or a block) without their first `excess[0]` proxy markers."""
    if isinstance(value, list):
        out = [_strip_own(v, excess) if excess[0] > 0 else v for v in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    if not isinstance(value, dict):
        return value
    if value.get("cache_control") is EPHEMERAL:
        excess[0] -= 1
        value = {k: v for k, v in value.items() if k != "cache_control"}
    content = value.get("content")
    if excess[0] > 0 and isinstance(content, list):
        stripped = _strip_own(content, excess)
        if stripped is not content:
            value = {**value, "content": stripped}
    return value


def cap_own_markers(body: Json, messages: list[Json], limit: int = MAX_CACHE_CONTROL) -> list[Json]:
    """`messages` (native) with the proxy's own markers dropped, oldest first, until system +
    tools + messages carry at most `limit`; the client's are all kept (a client that sends more
    than 4 itself gets the API's own 400). The input is not mutated."""
    excess = [cache_markers(body, messages) - limit]
    if excess[0] <= 0:
        return messages
    return [
        {**m, "content": _strip_own(m["content"], excess)}
        if excess[0] > 0 and isinstance(m.get("content"), list)
        else m
        for m in messages
    ]


def _is_summary(block: Any) -> bool:
    return (
        isinstance(block, dict) and block.get("type") == "text" and str(block.get("text", "")).startswith(SUMMARY_HEAD)
    )


AFTER_EVERY_KEY = 1 << 16
"""a marker's key position past the end of any block: `cache_control` goes last"""


def mark_point(message: Message) -> Message:
    """A copy of a common tool message whose result block carries a breakpoint when it is sent
    (unchanged when the client already marked that block)."""
    markers = message_markers(message)
    if any(not marker.get("path") for marker in markers):
        return message
    return {**message, MARKERS: [*markers, {"path": [], "index": AFTER_EVERY_KEY, "cache_control": EPHEMERAL}]}


def mark_summary(messages: list[Json]) -> list[Json]:
    """`messages` (native) with a cache_control breakpoint on the summary block's text, if there
    is one and it has none (copies; the input is not mutated)."""
    for position, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str) and content.startswith(SUMMARY_HEAD):
            blocks: list[Any] = [{"type": "text", "text": content, "cache_control": EPHEMERAL}]
        elif isinstance(content, list) and any(_is_summary(b) for b in content):
            blocks = [
                {**b, "cache_control": EPHEMERAL} if _is_summary(b) and "cache_control" not in b else b for b in content
            ]
        else:
            continue
        return [*messages[:position], {**message, "content": blocks}, *messages[position + 1 :]]
    return messages

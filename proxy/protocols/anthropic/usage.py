"""The Messages API's usage, normalized (server-side compaction iterations included)."""

from __future__ import annotations

from typing import Any

from ...usage import Usage, integer


def from_anthropic(raw: dict[str, Any] | None) -> Usage:
    """Anthropic Messages: `input_tokens`, `cache_read_input_tokens` and
    `cache_creation_input_tokens` are disjoint; their sum is the total input. A field the
    upstream did not report leaves the total unknown (None), never counted as 0. A server-side
    compaction's iteration is added to each field (`_compactions`)."""
    if not isinstance(raw, dict):
        return Usage()
    uncached = integer(raw.get("input_tokens"))
    read = integer(raw.get("cache_read_input_tokens"))
    write = integer(raw.get("cache_creation_input_tokens"))
    output = integer(raw.get("output_tokens"))
    for extra in _compactions(raw):
        uncached = _plus(uncached, extra.get("input_tokens"))
        read = _plus(read, extra.get("cache_read_input_tokens"))
        write = _plus(write, extra.get("cache_creation_input_tokens"))
        output = _plus(output, extra.get("output_tokens"))
    total = None
    if uncached is not None:
        total = uncached + (read or 0) + (write or 0)
    return Usage(
        input_total=total,
        input_uncached=uncached,
        cache_read=read,
        cache_write=write,
        output=output,
        reasoning=None,
    )


def _compactions(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The `compaction` entries of Anthropic's `usage.iterations`: the server-side compaction
    pass, billed but, unlike every other iteration, not included in the top-level fields (the
    SDK's `BetaIterationsUsage`). Booked once: the top level plus these."""
    iterations = raw.get("iterations")
    if not isinstance(iterations, list):
        return []
    return [i for i in iterations if isinstance(i, dict) and i.get("type") == "compaction"]


def _plus(total: int | None, extra: Any) -> int | None:
    """`total` plus an iteration's field; unknown stays unknown, a missing field adds nothing."""
    value = integer(extra)
    if total is None or value is None:
        return total
    return total + value

"""Usage normalization: every provider's usage object into one record, unknown stays None.

OpenAI counts cached tokens inside `prompt_tokens`; Anthropic reports `input_tokens`,
`cache_read_input_tokens` and `cache_creation_input_tokens` as three disjoint fields. Mixing the two
conventions is how gateways double-count or lose cached tokens, so each protocol has one function
here and everything downstream reads only `Usage`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Usage:
    input_total: int | None = None
    input_uncached: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    output: int | None = None
    reasoning: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        return asdict(self)


TOKEN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Usage))
"""The normalized token fields, in this order everywhere: call records, store columns, the ledger."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_openai_chat(raw: dict[str, Any] | None) -> Usage:
    """`prompt_tokens` is the total input; `cached_tokens` is a part of it."""
    if not isinstance(raw, dict):
        return Usage()
    total = _int(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    out_details = raw.get("completion_tokens_details")
    reasoning = _int(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) else None
    uncached = total - cached if total is not None and cached is not None else None
    return Usage(
        input_total=total,
        input_uncached=uncached,
        cache_read=cached,
        cache_write=None,
        output=_int(raw.get("completion_tokens")),
        reasoning=reasoning,
    )


def from_openai_responses(raw: dict[str, Any] | None) -> Usage:
    """Responses API: `input_tokens` is the total input; `input_tokens_details.cached_tokens` is a
    part of it, and so is `input_tokens_details.cache_write_tokens` when reported (newer API
    versions): input_total = input_uncached + cache_read + cache_write, as for Anthropic.
    `output_tokens_details.reasoning_tokens` is a part of `output_tokens`."""
    if not isinstance(raw, dict):
        return Usage()
    total = _int(raw.get("input_tokens"))
    details = raw.get("input_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    written = _int(details.get("cache_write_tokens")) if isinstance(details, dict) else None
    out_details = raw.get("output_tokens_details")
    reasoning = _int(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) else None
    uncached = total - cached - (written or 0) if total is not None and cached is not None else None
    return Usage(
        input_total=total,
        input_uncached=uncached,
        cache_read=cached,
        cache_write=written,
        output=_int(raw.get("output_tokens")),
        reasoning=reasoning,
    )


def from_anthropic(raw: dict[str, Any] | None) -> Usage:
    """Anthropic Messages: `input_tokens`, `cache_read_input_tokens` and
    `cache_creation_input_tokens` are disjoint; their sum is the total input. A field the
    upstream did not report leaves the total unknown (None), never counted as 0. A server-side
    compaction's iteration is added to each field (`_compactions`)."""
    if not isinstance(raw, dict):
        return Usage()
    uncached = _int(raw.get("input_tokens"))
    read = _int(raw.get("cache_read_input_tokens"))
    write = _int(raw.get("cache_creation_input_tokens"))
    output = _int(raw.get("output_tokens"))
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
    value = _int(extra)
    if total is None or value is None:
        return total
    return total + value

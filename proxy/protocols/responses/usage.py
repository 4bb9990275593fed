"""The Responses API's usage, normalized."""

from __future__ import annotations

from typing import Any

from ...usage import Usage, integer


def from_openai_responses(raw: dict[str, Any] | None) -> Usage:
    """Responses API: `input_tokens` is the total input; `input_tokens_details.cached_tokens` is a
    part of it, and so is `input_tokens_details.cache_write_tokens` when reported (newer API
    versions): input_total = input_uncached + cache_read + cache_write, as for Anthropic.
    `output_tokens_details.reasoning_tokens` is a part of `output_tokens`."""
    if not isinstance(raw, dict):
        return Usage()
    total = integer(raw.get("input_tokens"))
    details = raw.get("input_tokens_details")
    cached = integer(details.get("cached_tokens")) if isinstance(details, dict) else None
    written = integer(details.get("cache_write_tokens")) if isinstance(details, dict) else None
    out_details = raw.get("output_tokens_details")
    reasoning = integer(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) else None
    uncached = total - cached - (written or 0) if total is not None and cached is not None else None
    return Usage(
        input_total=total,
        input_uncached=uncached,
        cache_read=cached,
        cache_write=written,
        output=integer(raw.get("output_tokens")),
        reasoning=reasoning,
    )

"""The chat-completions API's usage, normalized."""

from __future__ import annotations

from typing import Any

from ...usage import Usage, integer


def from_openai_chat(raw: dict[str, Any] | None) -> Usage:
    """`prompt_tokens` is the total input; `cached_tokens` is a part of it."""
    if not isinstance(raw, dict):
        return Usage()
    total = integer(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    cached = integer(details.get("cached_tokens")) if isinstance(details, dict) else None
    out_details = raw.get("completion_tokens_details")
    reasoning = integer(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) else None
    uncached = total - cached if total is not None and cached is not None else None
    return Usage(
        input_total=total,
        input_uncached=uncached,
        cache_read=cached,
        cache_write=None,
        output=integer(raw.get("completion_tokens")),
        reasoning=reasoning,
    )

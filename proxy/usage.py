"""Usage normalization: every provider's usage object into one record, unknown stays None.

OpenAI counts cached tokens inside `prompt_tokens`; Anthropic reports `input_tokens`,
`cache_read_input_tokens` and `cache_creation_input_tokens` as three disjoint fields. Mixing the two
conventions is how gateways double-count or lose cached tokens, so each protocol has one function
here and everything downstream reads only `Usage`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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

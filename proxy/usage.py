"""Usage normalization: every provider's usage object into one record, unknown stays None.

OpenAI counts cached tokens inside `prompt_tokens`; Anthropic reports `input_tokens`,
`cache_read_input_tokens` and `cache_creation_input_tokens` as three disjoint fields. Mixing the two
conventions is how gateways double-count or lose cached tokens, so each wire has one function
(`Wire.usage`, in its own `proxy/protocols/<wire>/usage.py`) and everything downstream reads only
`Usage`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
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
        # Field by field: `dataclasses.asdict` deep-copies each value through its recursive walk,
        # several times the cost, on every call record.
        return {
            "input_total": self.input_total,
            "input_uncached": self.input_uncached,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "output": self.output,
            "reasoning": self.reasoning,
        }


TOKEN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Usage))
"""The normalized token fields, in this order everywhere: call records, store columns, the ledger."""


def integer(value: Any) -> int | None:
    """`value` when it is an int (not a bool), else None: a usage field as reported or unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None

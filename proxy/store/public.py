"""What every stored record shares: how the admin API shows it, and how its id is made."""

from __future__ import annotations

import secrets
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, ClassVar


class PublicRecord:
    """A stored record as the admin API shows it: `dataclasses.asdict` of the record, keeping the
    fields named in `public` in that order (internal ids, tenants and hashes stay out). Each time
    (`*_at`, Unix seconds: the cursors compare them) is followed by the same instant in ISO 8601
    UTC (`*_at_iso`), for people and tools that read dates."""

    public: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)  # type: ignore[call-overload]
        out: dict[str, Any] = {}
        for name in self.public:
            value = out[name] = values[name]
            if name.endswith("_at") and isinstance(value, (int, float)):
                out[name + "_iso"] = iso_utc(value)
        return out


def iso_utc(seconds: float) -> str:
    """`seconds` since the epoch as ISO 8601 UTC to the millisecond: 2026-12-04T21:41:12.123Z."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id(prefix: str) -> str:
    """A fresh random record id, ``{prefix}_{16 hex digits}``."""
    return f"{prefix}_{secrets.token_hex(8)}"

"""What every stored record shares: how the admin API shows it, and how its id is made."""

from __future__ import annotations

import secrets
from dataclasses import asdict
from typing import Any, ClassVar


class PublicRecord:
    """A stored record as the admin API shows it: `dataclasses.asdict` of the record, keeping the
    fields named in `public` in that order (internal ids, tenants and hashes stay out)."""

    public: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)  # type: ignore[call-overload]
        return {name: values[name] for name in self.public}


def new_id(prefix: str) -> str:
    """A fresh random record id, ``{prefix}_{16 hex digits}``."""
    return f"{prefix}_{secrets.token_hex(8)}"

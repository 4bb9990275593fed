"""Client keys made through the admin API, and the counters that budgets and rate limits read.

An `ApiKey` is LiteLLM's "virtual key": created by an operator (`POST /admin/keys`), shown once,
revoked by deleting it. The store never holds the key itself, only `digest`: HMAC-SHA256 of the
key under the store's tenant salt, so a copy of the store cannot be turned back into keys and
every replica sharing the store recognises the same keys (`proxy/keyring.py`).

A counter is a named number that many replicas add to at once (`add_counts`): each addition is
atomic, so the totals are exact however the requests spread over replicas. Each counter belongs
to one period and lives until `expires_at`, after which the store may forget it; the names say
what they count (`proxy/quota.py`: `tenant:team-a:usd:2026-12-05`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .public import PublicRecord


@dataclass(frozen=True)
class ApiKey(PublicRecord):
    id: str
    digest: str
    """hex HMAC-SHA256 of the key under the tenant salt; the key itself is never stored"""
    name: str
    tenant: str
    routes: tuple[str, ...] | None
    """the route names it may use (None: every route)"""
    limits: dict[str, Any]
    """budgets and rate limits (`proxy.quota.Limits`' fields that are set)"""
    hint: str
    """the key's last four characters, so that people can tell their keys apart"""
    created_at: float
    expires_at: float | None = None

    public = ("id", "name", "tenant", "routes", "limits", "hint", "created_at", "expires_at")


@dataclass(frozen=True)
class Count:
    """Add `amount` to counter `name`, which the store keeps at least until `expires_at`."""

    name: str
    amount: float
    expires_at: float


class AccessStore(Protocol):
    async def save_api_key(self, key: ApiKey) -> bool:
        """Store a new key; False, storing nothing, when its id or digest is stored already."""

    async def api_key_by_digest(self, digest: str) -> ApiKey | None: ...

    async def list_api_keys(self) -> list[ApiKey]:
        """Every stored key, oldest first."""

    async def delete_api_key(self, key_id: str) -> bool:
        """Revoke: the key is forgotten at once on every replica; False when there was none."""

    async def add_counts(self, counts: Sequence[Count]) -> list[float]:
        """Add each amount to its counter (an absent or expired counter starts at 0), each
        addition atomic on its own; the counters' new values, in order. An amount of 0 reads."""

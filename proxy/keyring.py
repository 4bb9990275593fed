"""Client keys made through the admin API (`POST /admin/keys`): their form, and how a presented
key is recognised.

Such a key is `ctxp-` + 43 URL-safe characters (256 random bits), shown once when it is made.
The store keeps HMAC-SHA256 of it under the store's tenant salt (`ApiKey.digest`), which every
replica sharing the store computes alike, so a key made or revoked through one replica is
honoured or refused by all of them from their next request. Only keys with the prefix are looked
up: a caller's own provider key (a route without `api_key_env`) costs no store read.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from .store.access import ApiKey
from .store.base import Store

PREFIX = "ctxp-"


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    return "key_" + secrets.token_hex(6)


def digest_of(salt: bytes, key: str) -> str:
    return hmac.new(salt, key.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


async def issued(store: Store, salt: bytes, presented: str | None) -> ApiKey | None:
    """The stored key `presented` is, or None (no key, not of this form, or not stored: revoked)."""
    if not presented or not presented.startswith(PREFIX):
        return None
    return await store.api_key_by_digest(digest_of(salt, presented))

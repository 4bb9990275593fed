"""Opaque, verifiable blobs for the scripted upstreams' compaction results.

Both providers hand back compaction state the client must return verbatim and cannot read:
OpenAI's compaction item carries ``encrypted_content`` (Fernet tokens, ``gAAA...``), Anthropic's
compaction block an ``encrypted_content`` "to be round-tripped verbatim". A scripted server must
tell its own blobs from altered or invented ones, as the real APIs do, so a blob here is
urlsafe base64 of ``0x80 | JSON payload | HMAC-SHA256(key, 0x80 | payload)``: opaque to a client (the
leading 0x80 byte makes it start with ``g``, as Fernet's ``gAAA`` does), checked by :func:`unseal`.

Example::

    blob = seal(b"openai-compaction", {"summary": "...", "items": 12})
    unseal(b"openai-compaction", blob)        # {"summary": "...", "items": 12}
    unseal(b"openai-compaction", blob[:-4] + "AAAA")   # None
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any

__all__ = ["seal", "unseal"]

_VERSION = b"\x80"
_MAC = 32


def seal(key: bytes, payload: dict[str, Any]) -> str:
    data = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    mac = hmac.new(key, _VERSION + data, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(_VERSION + data + mac).decode()


def unseal(key: bytes, blob: Any) -> dict[str, Any] | None:
    """The payload `blob` was sealed with under `key`, or None (not a string, not base64,
    altered, sealed with another key)."""
    if not isinstance(blob, str):
        return None
    try:
        raw = base64.urlsafe_b64decode(blob.encode())
    except (binascii.Error, ValueError):
        return None
    if len(raw) <= 1 + _MAC or raw[:1] != _VERSION:
        return None
    signed, mac = raw[:-_MAC], raw[-_MAC:]
    if not hmac.compare_digest(mac, hmac.new(key, signed, hashlib.sha256).digest()):
        return None
    try:
        payload = json.loads(signed[1:])
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None

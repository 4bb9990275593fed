"""Client keys made through the admin API and the counters of budgets and rate limits
(proxy/store/access.py).

    P{access}:api-keys      hash    digest -> key record JSON (every key; one slot)
    P counter:{name}        string  a counter's value (INCRBYFLOAT), expiring at its period's end

Keys are few (an operator's list), so reads by id scan the hash. Each counter addition is one
INCRBYFLOAT, atomic on the server whichever replica sends it; the additions of one call go in one
pipeline (in a cluster, split by node).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict

from ... import codec
from ..access import ApiKey, Count
from .connection import RedisConnection, guarded


def _key(payload: str) -> ApiKey:
    fields = codec.loads(payload)
    routes = fields.get("routes")
    fields["routes"] = None if routes is None else tuple(routes)
    return ApiKey(**fields)


class Access(RedisConnection):
    @property
    def _api_keys(self) -> str:
        return self.keys.tagged("access", "api-keys")

    @guarded
    async def save_api_key(self, key: ApiKey) -> bool:
        if any(k.id == key.id for k in await self.list_api_keys()):
            return False
        return bool(await self.r.hsetnx(self._api_keys, key.digest, codec.dumps_str(asdict(key))))

    @guarded
    async def api_key_by_digest(self, digest: str) -> ApiKey | None:
        payload = await self.r.hget(self._api_keys, digest)
        return None if payload is None else _key(payload)

    @guarded
    async def list_api_keys(self) -> list[ApiKey]:
        keys = [_key(v) for v in (await self.r.hgetall(self._api_keys)).values()]
        return sorted(keys, key=lambda k: (k.created_at, k.id))

    @guarded
    async def delete_api_key(self, key_id: str) -> bool:
        for key in await self.list_api_keys():
            if key.id == key_id:
                return bool(await self.r.hdel(self._api_keys, key.digest))
        return False

    @guarded
    async def add_counts(self, counts: Sequence[Count]) -> list[float]:
        if not counts:
            return []
        async with self.r.pipeline(transaction=False) as pipe:
            for count in counts:
                name = self.keys.plain("counter", count.name)
                pipe.incrbyfloat(name, count.amount)
                pipe.expireat(name, math.ceil(count.expires_at))
            replies = await pipe.execute()
        return [float(value) for value in replies[0::2]]

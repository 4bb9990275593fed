"""A Redis store (one server or a cluster) as `migrate-store`'s source (proxy/store/migrate.py).

The Redis backend keeps a conversation as a few hashes and lists in its slot (the layout in
proxy/store/redis/keys.py: events and call records as JSON fields, branches as groups of fields);
this reads them and gives the copier the rows PostgreSQL keeps, column for column, encoded as
the PostgreSQL backend encodes them (messages, responses, usage and projections as the codec's
JSON text; the normalized usage as one column per token field). Only reads: it writes nothing to
the source. (It takes the copier's tables by their `name` and `key`, and does not import the
copier's module, which imports this one.)
"""

from __future__ import annotations

import time
from typing import Any

from .. import codec
from ..usage import TOKEN_FIELDS
from .base import tokens_saved
from .redis import RedisStore

Row = tuple[Any, ...]


def _json(value: Any) -> str | None:
    return None if value is None else codec.dumps_str(value)


def _call_row(record: dict[str, Any]) -> dict[str, Any]:
    """A call record's JSON as PostgreSQL's `calls` columns (postgres/calls.py `call_insert`)."""
    row = dict(record)
    usage = row.pop("usage", None) or {}
    row.update({field: usage.get(field) for field in TOKEN_FIELDS})
    row["stream"] = bool(row.get("stream"))
    for name in ("response", "usage_raw", "projection"):
        row[name] = _json(row.get(name))
    row["tokens_saved"] = tokens_saved(row.get("purpose", ""), record.get("projection"))
    return row


def _memory_row(record: dict[str, Any]) -> dict[str, Any]:
    """A memory record's JSON as the `memories` columns (postgres/memories.py)."""
    row = dict(record)
    source = row.get("source") or {}
    conversation = source.get("conversation_id") if isinstance(source, dict) else None
    row["source"] = codec.dumps_str(source)
    row["confirmed_times"] = codec.dumps_str(list(row.get("confirmed_times") or ()))
    row["source_conversation"] = conversation if isinstance(conversation, str) else None
    return row


class RedisSource:
    """The rows of an open `RedisStore`, read with its client and key layout."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.r = store.r
        self.keys = store.keys
        self._globals: dict[str, list[Row]] = {}
        self._batch: tuple[tuple[str, ...], list[dict[str, Any]]] = ((), [])

    async def columns(self, table: str) -> list[str] | None:
        return None  # every target column is filled (or None, like a SQLite column added later)

    async def salt(self) -> str | None:
        value = await self.r.get(self.keys.plain("meta", "tenant_salt"))
        return None if value is None else str(value)

    async def conversation_ids(self) -> list[str]:
        shards = await self.store.scatter(
            lambda pipe, tag: pipe.zrange(self.keys.tagged(tag, "convs"), 0, -1, withscores=True)
        )
        pairs = [(score, cid) for shard in shards for cid, score in shard]
        return [cid for _score, cid in sorted(pairs)]

    async def all_rows(self, table: Any, cols: list[str]) -> list[Row]:
        """Read once a run: a counter's expiry is derived from its remaining time to live, which
        would differ between the copy and the verification."""
        if table.name not in self._globals:
            self._globals[table.name] = await self._all_rows(table, cols)
        return self._globals[table.name]

    async def _all_rows(self, table: Any, cols: list[str]) -> list[Row]:
        rows: list[dict[str, Any]] = []
        if table.name == "blobs":
            async for key in self.r.scan_iter(match=self.keys.plain("blob", "*"), count=1000):
                rows.append({"digest": key.removeprefix(self.keys.plain("blob", "")), "data": await self.r.get(key)})
        elif table.name == "counters":
            now = time.time()
            async for key in self.r.scan_iter(match=self.keys.plain("counter", "*"), count=1000):
                value, ttl = await self.r.get(key), await self.r.pttl(key)
                if value is not None:
                    expires = now + ttl / 1000 if ttl > 0 else now + 86400 * 366
                    rows.append(
                        {
                            "name": key.removeprefix(self.keys.plain("counter", "")),
                            "value": float(value),
                            "expires_at": expires,
                        }
                    )
        elif table.name == "api_keys":
            for payload in (await self.r.hgetall(self.keys.tagged("access", "api-keys"))).values():
                record = codec.loads(payload)
                rows.append(
                    {
                        "id": record["id"],
                        "digest": record["digest"],
                        "record": payload,
                        "created_at": record["created_at"],
                    }
                )
        elif table.name == "memories":
            shards = await self.store.scatter(lambda pipe, tag: pipe.hgetall(self.keys.tagged(tag, "memories")))
            rows = [_memory_row(codec.loads(p)) for shard in shards for p in shard.values()]
        elif table.name == "tombstones":
            shards = await self.store.scatter(
                lambda pipe, tag: pipe.zrange(self.keys.tagged(tag, "tombstones"), 0, -1, withscores=True)
            )
            rows = [{"conversation_id": cid, "deleted_at": at} for shard in shards for cid, at in shard]
        return _ordered(rows, cols, table.key)

    async def loose_calls(self, cols: list[str]) -> list[Row]:
        shards = await self.store.scatter(lambda pipe, tag: pipe.hgetall(self.keys.tagged(tag, "orphan-calls")))
        rows = [_call_row(codec.loads(p)) for shard in shards for p in shard.values()]
        return _ordered(rows, cols, ("id",))

    async def owned_rows(self, table: Any, cols: list[str], ids: list[str]) -> list[Row]:
        batch = tuple(ids)
        if self._batch[0] != batch:  # the copier asks for each table of one batch in turn
            self._batch = (batch, await self._read_batch(ids))
        rows: list[dict[str, Any]] = []
        for cid, raw in zip(ids, self._batch[1], strict=True):
            rows.extend(_owned(table.name, cid, raw))
        return [tuple(row.get(c) for c in cols) for row in rows]

    async def _read_batch(self, ids: list[str]) -> list[dict[str, Any]]:
        """Every key the conversations `ids` own, in one pipeline (split by node on a cluster)."""
        async with self.r.pipeline(transaction=False) as pipe:
            for cid in ids:
                for kind in _KINDS:
                    key = self.keys.one(cid, kind)
                    if kind in ("blist", "cklist"):
                        pipe.lrange(key, 0, -1)
                    elif kind == "calls":
                        pipe.zrange(key, 0, -1)
                    else:
                        pipe.hgetall(key)
            replies = await pipe.execute()
        n = len(_KINDS)
        return [dict(zip(_KINDS, replies[i * n : (i + 1) * n], strict=True)) for i in range(len(ids))]


_KINDS = ("conv", "blist", "branches", "events", "chain", "cklist", "cks", "calls", "records", "leases")
"""The keys of a conversation the copy reads (proxy/store/redis/keys.py)."""


def _owned(table: str, cid: str, raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of `table` one conversation owns, in the order it made them, from its keys `raw`."""
    if table == "conversations":
        conv = raw["conv"]
        if not conv:
            return []
        return [
            {
                **conv,
                "created_at": float(conv["created_at"]),
                "updated_at": float(conv["updated_at"]),
                "external_id": conv.get("external_id"),
            }
        ]
    if table == "branches":
        ids, fields = raw["blist"], raw["branches"]
        return [
            {
                "id": b,
                "conversation_id": cid,
                "parent_id": fields.get(f"{b}:parent"),
                "fork_seq": int(fields[f"{b}:fork"]),
                "head_seq": int(fields[f"{b}:head"]),
                "system_hash": fields.get(f"{b}:sys"),
                "created_at": float(fields[f"{b}:created"]),
                "updated_at": float(fields[f"{b}:updated"]),
            }
            for b in ids
            if f"{b}:head" in fields
        ]
    if table == "events":
        events, chain = raw["events"], raw["chain"]
        rows = []
        for where, payload in events.items():
            bid, seq = where.rsplit(":", 1)
            event = codec.loads(payload)
            rows.append(
                {
                    "branch_id": bid,
                    "seq": int(seq),
                    "conversation_id": cid,
                    "role": event["role"],
                    "message": codec.dumps_str(event["message"]),
                    "chain_hash": chain[where],
                    "source": event["source"],
                    "tokens": event.get("tokens"),
                    "call_id": event.get("call_id"),
                    "created_at": event["created_at"],
                }
            )
        return sorted(rows, key=lambda r: (r["branch_id"], r["seq"]))
    if table == "checkpoints":
        ids, fields = raw["cklist"], raw["cks"]
        return [{**codec.loads(fields[ck]), "status": fields[f"{ck}:status"]} for ck in ids if ck in fields]
    if table == "calls":
        order = raw["calls"]
        records = raw["records"]
        return [_call_row(codec.loads(records[c])) for c in order if c in records]
    if table == "leases":
        return _leases(cid, raw["leases"])
    return []


def _leases(cid: str, fields: dict[str, str]) -> list[dict[str, Any]]:
    """The compaction leases: each branch's fencing token (it only grows) and its holder, if any."""
    rows = []
    for name, value in fields.items():
        if not name.startswith("token:"):
            continue
        bid = name.removeprefix("token:")
        held = fields.get(f"lease:{bid}")
        owner, expires = None, 0.0
        if held is not None:
            owner_part, _token, expires_ms = held.rsplit(" ", 2)
            owner, expires = owner_part, int(expires_ms) / 1000
        rows.append(
            {"branch_id": bid, "conversation_id": cid, "owner": owner, "token": int(value), "expires_at": expires}
        )
    return sorted(rows, key=lambda r: r["branch_id"])


def _ordered(rows: list[dict[str, Any]], cols: list[str], key: tuple[str, ...]) -> list[Row]:
    """Rows as tuples in `cols` order, sorted by the table's key (a stable order to insert in)."""
    rows.sort(key=lambda r: tuple(str(r.get(k)) for k in key))
    return [tuple(row.get(c) for c in cols) for row in rows]

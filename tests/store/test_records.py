"""The records' public JSON (what the admin API returns) keeps its keys and their order."""

from __future__ import annotations

import json
from typing import Any

from proxy.store.base import Branch, CallRecord, Conversation, StoredCheckpoint, StoredEvent
from proxy.store.public import iso_utc


def test_public_shapes_keep_their_keys_in_order() -> None:
    records: list[tuple[Any, list[str]]] = [
        (Conversation("c_1", "t_x", "ext", 1.0, 2.0, "b_1"), [
            "id", "tenant", "external_id", "created_at", "created_at_iso", "updated_at", "updated_at_iso",
        ]),
        (Branch("b_2", "c_1", "b_1", 3, 5, 1.0, 2.0), [
            "id", "parent_id", "fork_seq", "head_seq", "created_at", "created_at_iso", "updated_at",
            "updated_at_iso",
        ]),
        (StoredEvent("b_1", 4, "user", {"role": "user", "content": "hi"}, "h", "request", 2, 1.0), [
            "seq", "branch_id", "role", "message", "source", "tokens", "created_at", "created_at_iso",
        ]),
        (CallRecord("k", "t_x", "r", "m", "main", True, 1.0, "c_1", "b_1", system_hash="s", tools_hash="t"), [
            "id", "conversation_id", "branch_id", "route", "model", "purpose", "stream", "status",
            "upstream_status", "error", "started_at", "started_at_iso", "latency_ms", "ttfb_ms", "response",
            "finish_reason", "usage_raw", "usage", "request_id", "projection", "cost_usd", "wire", "saved_usd",
            "client",
        ]),
        (StoredCheckpoint("ck_1", "c_1", "b_1", 1, 1, 4, "h", "text", 9, None, 1, "active", 1.0), [
            "id", "branch_id", "generation", "from_seq", "covered_through_seq", "summary", "tokens", "model",
            "format_version", "status", "created_at", "created_at_iso", "error",
        ]),
    ]  # fmt: skip
    for record, keys in records:
        public = record.to_dict()
        assert list(public) == keys, type(record).__name__
        times = {k for k in keys if k.endswith("_iso")}
        assert {k: v for k, v in public.items() if k not in times} == {
            k: getattr(record, k) for k in keys if k not in times
        }
        assert all(public[k] == iso_utc(public[k.removesuffix("_iso")]) for k in times)
        json.dumps(public)

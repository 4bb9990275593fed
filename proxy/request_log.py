"""The request log: one structured line per model call, written when its record is (`Recorder.finish`).

What an operator watching the console needs of each call, without the admin API: which
conversation, wire, route and model, how it ended (the call's status and the upstream's), the
tokens of the client's history against those sent, what ctxproxy rewrote, recall rounds, latency.
`request_log.level` is `off`, `info` (those fields) or `debug` (plus tenant, client key, branch,
purpose of follow-up calls, time to first byte, billed usage, cost, the upstream's request id);
`request_log.format` is `kv` (`key=value`, quoted when needed) or `json` (one object a line). The
error text is the record's, with every operator secret redacted again here, and cut to 300
characters. Lines go to the `ctxproxy.requests` logger, on stderr as they are (no prefix), so a
collector can parse them whole.

Example (kv, info):
    ts=2026-12-04T21:50:02.114Z call=call_5f.. conversation=c_91.. wire=openai_chat route=openai
    model=gpt-5 stream=true status=complete upstream=200 client_tokens=48210 sent_tokens=20114
    rewritten=trimmed:12,summary:g3 recall_rounds=0 latency_ms=2310.5
"""

from __future__ import annotations

import json
import logging
import re
import sys
from typing import Any

from .config import RequestLog
from .credentials import Keys
from .store.base import CallRecord
from .store.public import iso_utc

LOGGER = "ctxproxy.requests"
ERROR_CHARS = 300
_BARE = re.compile(r"^[A-Za-z0-9_.:/@+,-]+$")


def rewritten(projection: dict[str, Any] | None) -> str:
    """What the projection changed, compactly: `as_sent` (nothing), `mode:observe`, or the changes
    joined by commas (`trimmed:N`, `pruned:N`, `summary:gN`, `cut_to_fit:N`, `orphans:N`)."""
    if not projection:
        return "as_sent"
    if "mode" in projection:
        return f"mode:{projection['mode']}"
    parts = []
    if projection.get("trimmed"):
        parts.append(f"trimmed:{projection['trimmed']}")
    pruned = sum(last - first + 1 for first, last in projection.get("pruned_seqs") or [])
    if pruned:
        parts.append(f"pruned:{pruned}")
    if projection.get("checkpoint_generation") is not None:
        parts.append(f"summary:g{projection['checkpoint_generation']}")
    for name in ("cut_to_fit", "orphans", "repaired"):
        value = projection.get(name)
        count = len(value) if isinstance(value, list) else value
        if count:
            parts.append(f"{name}:{count}")
    return ",".join(parts) or "as_sent"


class RequestLogger:
    """Writes the line of each finished call record, as `settings` say; `keys` redact secrets."""

    def __init__(self, settings: RequestLog, keys: Keys) -> None:
        self.settings = settings
        self.keys = keys
        self.log = logging.getLogger(LOGGER)
        if settings.level != "off" and not self.log.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            self.log.addHandler(handler)
            self.log.propagate = False  # the line as it is, not behind the root logger's prefix
        self.log.setLevel(logging.INFO)

    def fields(self, call: CallRecord, wire: str) -> dict[str, Any]:
        """The line's fields for `call`, in order (None values are left out)."""
        projection = call.projection or {}
        usage = call.usage or {}
        out: dict[str, Any] = {
            "ts": iso_utc(call.started_at),
            "call": call.id,
            "conversation": call.conversation_id,
            "wire": wire,
            "route": call.route,
            "model": call.model,
            "purpose": call.purpose if call.purpose != "main" else None,
            "stream": call.stream,
            "status": call.status,
            "upstream": call.upstream_status,
            "client_tokens": projection.get("client_tokens"),
            "sent_tokens": projection.get("sent_tokens"),
            "rewritten": rewritten(call.projection) if call.purpose == "main" else None,
            "recall_rounds": projection.get("recall_rounds", 0) if call.purpose == "main" else None,
            "latency_ms": call.latency_ms,
        }
        if self.settings.level == "debug":
            out.update(
                tenant=call.tenant,
                client=call.client,
                branch=call.branch_id,
                ttfb_ms=call.ttfb_ms,
                input_tokens=usage.get("input_total"),
                cached_tokens=usage.get("cache_read"),
                output_tokens=usage.get("output"),
                cost_usd=call.cost_usd,
                request_id=call.request_id,
            )
        if call.error:
            text = self.keys.redact(call.error.encode("utf-8", "replace")).decode("utf-8", "replace")
            out["error"] = " ".join(text.split())[:ERROR_CHARS]
        return {k: v for k, v in out.items() if v is not None}

    def line(self, call: CallRecord, wire: str) -> str:
        fields = self.fields(call, wire)
        if self.settings.format == "json":
            return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
        return " ".join(f"{k}={_kv(v)}" for k, v in fields.items())

    def write(self, call: CallRecord, wire: str) -> None:
        if self.settings.level != "off":
            self.log.info(self.line(call, wire))


def _kv(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return text if _BARE.match(text) else json.dumps(text, ensure_ascii=False)

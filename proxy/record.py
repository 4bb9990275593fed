"""Record (DESIGN step 7): every upstream call becomes one call record, whatever its purpose.

A call is opened before it goes upstream (`Recorder.open`), its outcome is read into it when it
ends (`answered` for a whole body, `streamed` for a relayed stream, `failed` when the hop raised),
and `Recorder.finish` is the one place a record is completed and written: cost at the provider
model's prices, metrics, then the store (an accepted main call's record together with its response
turn). The purposes are `main` (the client's own call) and `summary` (a compaction's summarizer
call) and `recall` (a call whose answer called the proxy's recall tool and was consumed by it,
`proxy/recall/`); all go to the ledger, and only main calls feed the context calibration.

The status of a streamed call follows from who ended it: the end event reaching the client is
`complete` (a disconnect after it is the client hanging up, not a loss); a client that went away
earlier leaves `partial`; an upstream that broke off leaves `partial` if it had sent chunks, else
`error`; an error event inside the stream (Anthropic `error`, Responses `response.failed`) is `error`.
A whole answer the client hung up before is `partial` too (`client_left`).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from typing import Any

from . import codec
from .catalog import ModelCatalog
from .config import Route
from .errors import ProxyError, StoreError, UpstreamTimeout
from .identify import blob_hash, blob_text
from .ledger import call_cost
from .metrics import Metrics
from .protocols.base import StreamObserver, Wire
from .relay import StreamOutcome
from .store.base import CallRecord, Position, ResponseTurn, Store
from .upstream.base import UpstreamResponse
from .upstream.litellm import usage_from_litellm

log = logging.getLogger("ctxproxy")


def new_call_id() -> str:
    return "call_" + secrets.token_hex(10)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def error_kind(exc: ProxyError, answering: bool = False) -> str:
    """The `kind` label of ctxproxy_upstream_errors_total for a failure raised by the hop:
    `timeout`, `connect` (no answer), `broken` (the answer broke off), else `http_<status>`."""
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    if exc.status == 502:
        return "broken" if answering else "connect"
    return f"http_{exc.status}"


def failed(call: CallRecord, exc: ProxyError, t0: float) -> None:
    """The hop raised before or while the answer arrived."""
    call.error = exc.message
    call.latency_ms = ms(time.monotonic() - t0)


def client_left(call: CallRecord, t0: float) -> None:
    """The client hung up before a whole answer reached it; the upstream request was cancelled."""
    call.status = "partial"
    call.error = "client disconnected before the answer was complete"
    call.latency_ms = ms(time.monotonic() - t0)


def answered(call: CallRecord, wire: Wire, status: int, data: bytes) -> str | None:
    """Read a whole upstream answer into the record; returns the metrics error kind, if any."""
    parsed = _json_object(data)
    if status == 200 and parsed is not None:
        call.response, call.finish_reason, call.usage_raw = wire.response(parsed)
        call.usage = wire.usage(call.usage_raw).to_dict()
        call.status = "complete"
        return None
    call.status = "error"
    call.error = data[:4000].decode("utf-8", errors="replace")
    call.usage = wire.usage(None).to_dict()
    return f"http_{status}" if status != 200 else "malformed"


def streamed(
    call: CallRecord,
    wire: Wire,
    upstream: UpstreamResponse,
    observer: StreamObserver,
    outcome: StreamOutcome,
    t0: float,
) -> str | None:
    """Read a relayed stream's outcome into the record; returns the metrics error kind, if any."""
    chunks = observer.chunks
    call.upstream_status = upstream.status
    call.request_id = upstream.request_id
    call.ttfb_ms = ms(outcome.first_byte_at - t0) if outcome.first_byte_at else None
    call.latency_ms = ms((outcome.ended_at or time.monotonic()) - t0)
    call.response = observer.message()
    call.finish_reason = observer.finish_reason()
    call.usage_raw = observer.usage_raw()
    call.usage = wire.usage(call.usage_raw).to_dict()
    failure = observer.failure()
    if failure is not None and outcome.error is None:
        call.status, call.error = "error", failure
    elif observer.done and outcome.error is None:
        call.status = "complete"
    elif outcome.client_disconnected:
        call.status, call.error = "partial", f"client disconnected after {chunks} chunks"
    elif outcome.error is not None:
        call.status, call.error = ("partial" if chunks else "error"), outcome.error.message
    else:
        call.status = "partial"
        call.error = f"upstream closed the stream after {chunks} chunks without its end event"
    if outcome.error is not None:
        return error_kind(outcome.error, answering=True)
    if call.status != "complete" and not outcome.client_disconnected:
        return "stream_error" if failure is not None else "truncated"
    return None


class BoundedSet:
    """Remembers the most recent `size` keys; `add` says whether the key was new."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self.size:
            self._keys.popitem(last=False)
        return True


class Recorder:
    """Completes and writes call records; one per process, shared by requests and compactions."""

    def __init__(self, store: Store, metrics: Metrics, catalog: ModelCatalog, routes: list[Route]) -> None:
        self.store = store
        self.metrics = metrics
        self.catalog = catalog
        self._provider_models = {r.name: r.upstream.model for r in routes if r.upstream.model}
        self._known_blobs = BoundedSet()

    def open(
        self, tenant: str, route: Route, model: str | None, purpose: str, stream: bool, started: float | None = None
    ) -> CallRecord:
        return CallRecord(
            id=new_call_id(),
            tenant=tenant,
            route=route.name,
            model=model,
            purpose=purpose,
            stream=stream,
            started_at=time.time() if started is None else started,
        )

    async def blob(self, value: Any, digest: str | None = None) -> str | None:
        """System prefixes and tool definitions are stored once by content, referenced by calls."""
        if not value:
            return None
        if digest is not None and not self._known_blobs.add(digest):
            return digest  # stored already: no need to serialize it again
        data = blob_text(value)
        if digest is None:
            digest = blob_hash(data)
            if not self._known_blobs.add(digest):
                return digest
        await self.store.put_blob(digest, data)
        return digest

    async def finish(
        self, call: CallRecord, wire: str, error_kind: str | None = None, turn: ResponseTurn | None = None
    ) -> Position | None:
        """The one place a record is completed: cost, metrics, then the store -- in one write with
        `turn`, the response turn of the accepted request the call answered; returns where its
        answer was stored (None: no answer stored). A store failure is logged, never raised: the
        client has (or is getting) its answer already."""
        provider_model = self._provider_models.get(call.route) if call.purpose == "main" else None
        if provider_model and call.usage_raw is not None:
            call.usage = usage_from_litellm(call.usage_raw).to_dict()  # litellm's cache writes are inside the input
        price_model = provider_model or call.model
        call.cost_usd = call_cost(call.usage, self.catalog.info(price_model)) if price_model else None
        self.metrics.observe_call(call, wire, error_kind)
        try:
            if turn is None:
                await self.store.record_call(call)
                return None
            stored = await self.store.record_answered(call, turn)
        except StoreError as exc:
            log.error("call record %s not stored%s: %s", call.id, "" if turn is None else ", nor its response", exc)
            return None
        if isinstance(stored, StoreError):
            # The turn had nowhere to go (its branch retracted meanwhile by an identical rejected
            # request): the client has its answer, the call record says what happened.
            log.warning("response of call %s not stored: %s", call.id, stored)
            return None
        return stored


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        parsed = codec.loads(data)
    except codec.JsonRejected:
        return None
    return parsed if isinstance(parsed, dict) else None

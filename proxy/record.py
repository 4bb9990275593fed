"""Record (DESIGN step 7): every upstream call becomes one call record, whatever its purpose.

A call is opened before it goes upstream (`Recorder.open`), its outcome is read into it when it
ends (`answered` for a whole body, `streamed` for a relayed stream, `failed` when the hop raised),
and `Recorder.finish` is the one place a record is completed and written: cost at the provider
model's prices, metrics, then the store (an accepted main call's record together with its response
turn). The purposes are `main` (the client's own call) and `summary` (a compaction's summarizer
call), `recall` (a call whose answer called the proxy's recall tool and was consumed by it,
`proxy/recall/`) and `shadow` (the client's request sent again unrewritten, `proxy/shadow/`);
all go to the ledger, and only main calls feed the context calibration.

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

from . import codec, tracing
from .admission import Admission
from .catalog import ModelCatalog
from .config import Route
from .errors import ProxyError, StoreError, UpstreamTimeout
from .identify import blob_hash, blob_text
from .ledger import call_cost, saved_cost
from .metrics import Metrics
from .protocols.base import StreamObserver, Wire
from .relay import StreamOutcome
from .request_log import RequestLogger
from .store.base import CallRecord, Position, ResponseTurn, Store, tokens_saved
from .summarizer import SummaryResult
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


def attach(
    call: CallRecord,
    conversation_id: str,
    branch_id: str,
    system_hash: str | None = None,
    tools_hash: str | None = None,
) -> None:
    """The call belongs to this conversation and branch, and was sent with this prefix and tools."""
    call.conversation_id, call.branch_id = conversation_id, branch_id
    call.system_hash, call.tools_hash = system_hash, tools_hash


def detach(call: CallRecord) -> None:
    """The call got no answer its branch keeps: it is no branch's last call."""
    call.branch_id = None


def projected(call: CallRecord, projection: dict[str, Any]) -> None:
    """What the projection of the call's request did (`Projected.summary`)."""
    call.projection = projection


def noted(call: CallRecord, **facts: Any) -> None:
    """More about how the call's request was made, kept with its projection record."""
    if call.projection is not None:
        call.projection = {**call.projection, **facts}


def arrived(call: CallRecord, upstream: UpstreamResponse, t0: float) -> None:
    """The upstream's answer began: its status, its request id, the time to it."""
    call.upstream_status, call.request_id = upstream.status, upstream.request_id
    call.ttfb_ms = ms(time.monotonic() - t0)


def consumed(call: CallRecord, wire: Wire, upstream: UpstreamResponse, data: bytes, t0: float, why: str) -> str | None:
    """A whole answer the proxy kept from the client (`why`: recall called, or the request was
    refused and is sent again): the record of purpose `recall` or `overflow`; the metrics error
    kind, if any."""
    arrived(call, upstream, t0)
    call.latency_ms = call.ttfb_ms
    kind = answered(call, wire, upstream.status, data)
    call.purpose = why
    return kind


def refused_in_stream(call: CallRecord, wire: Wire, upstream: UpstreamResponse, failure: bytes, t0: float) -> str:
    """A stream that failed before its answer began, kept from the client and sent again."""
    arrived(call, upstream, t0)
    call.latency_ms = call.ttfb_ms
    call.status, call.error = "error", failure[:4000].decode("utf-8", "replace")
    call.usage = wire.usage(None).to_dict()
    call.purpose = "overflow"
    return "stream_error"


def explained(call: CallRecord, error: str) -> None:
    """Why the call's answer was not the client's, in words."""
    call.error = error


def summarized(call: CallRecord, result: SummaryResult, first: int | None, last: int | None, estimated: int) -> None:
    """A summarizer call's outcome: its text (the reply), usage, status and timing."""
    call.started_at -= result.latency_ms / 1000
    done = result.text is not None or bool(result.native)
    call.status = "complete" if done else "error"
    call.upstream_status, call.error, call.latency_ms = result.upstream_status, result.error, result.latency_ms
    text = result.text if result.text is not None else f"[provider compaction, opaque: {len(result.native)} messages]"
    call.response = {"role": "assistant", "content": text} if done else None
    call.usage_raw, call.usage = result.usage_raw, result.usage.to_dict()
    call.projection = {"summarized_seqs": [first, last] if first is not None else [], "sent_tokens": estimated}


def answered(call: CallRecord, wire: Wire, status: int, data: bytes, t0: float | None = None) -> str | None:
    """Read a whole upstream answer into the record (`t0`: when the call was sent, for its
    latency); returns the metrics error kind, if any."""
    if t0 is not None:
        call.latency_ms = ms(time.monotonic() - t0)
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
    purpose: str | None = None,
) -> str | None:
    """Read a relayed stream's outcome into the record (`purpose`: what the answer turned out to
    be for, when not what the record was opened as); returns the metrics error kind, if any."""
    chunks = observer.chunks
    if purpose is not None:
        call.purpose = purpose
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

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        catalog: ModelCatalog,
        routes: list[Route],
        requests: RequestLogger | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.catalog = catalog
        self.requests = requests
        """the request log's line per call (None: none)"""
        self.admission = admission
        """budgets and rate limits, charged with each call once recorded (None: none)"""
        self._provider_models = {r.name: r.upstream.model for r in routes if r.upstream.model}
        self._known_blobs = BoundedSet()

    def open(
        self,
        tenant: str,
        route: Route,
        wire: Wire,
        model: str | None,
        purpose: str,
        stream: bool,
        started: float | None = None,
        client: str | None = None,
    ) -> CallRecord:
        return CallRecord(
            id=new_call_id(),
            tenant=tenant,
            route=route.name,
            model=model,
            purpose=purpose,
            stream=stream,
            started_at=time.time() if started is None else started,
            wire=wire.name,
            client=client,
        )

    def follow(self, previous: CallRecord, purpose: str = "main") -> CallRecord:
        """The record of another call for the same request: its tenant, route, wire, model, stream,
        conversation, branch, prefix and tools."""
        return CallRecord(
            id=new_call_id(),
            tenant=previous.tenant,
            route=previous.route,
            model=previous.model,
            purpose=purpose,
            stream=previous.stream,
            started_at=time.time(),
            conversation_id=previous.conversation_id,
            branch_id=previous.branch_id,
            system_hash=previous.system_hash,
            tools_hash=previous.tools_hash,
            wire=previous.wire,
            client=previous.client,
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
        self, call: CallRecord, wire: Wire, error_kind: str | None = None, turn: ResponseTurn | None = None
    ) -> Position | None:
        """The one place a record is completed: cost, metrics, budgets, then the store -- in one write with
        `turn`, the response turn of the accepted request the call answered; returns where its
        answer was stored (None: no answer stored). A store failure is logged, never raised: the
        client has (or is getting) its answer already."""
        provider_model = self._provider_models.get(call.route) if call.purpose in ("main", "shadow") else None
        if provider_model and call.usage_raw is not None:
            # litellm's cache writes are inside the input; the raw usage is in the wire's shape
            call.usage = usage_from_litellm(call.usage_raw, wire).to_dict()
        price_model = provider_model or call.model
        info = self.catalog.info(price_model) if price_model else None
        call.cost_usd = call_cost(call.usage, info)
        call.saved_usd = saved_cost(tokens_saved(call.purpose, call.projection), call.usage, info)
        self.metrics.observe_call(call, wire.name, error_kind)
        tracing.recorded(call, wire.provider)
        if self.requests is not None:
            self.requests.write(call, wire.name)
        if self.admission is not None:  # billed whether or not the record can be stored
            await self.admission.charge(call)
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

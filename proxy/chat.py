"""The orchestrator of every proxied model call, whatever the client API (the `Wire`).
Reads as DESIGN's steps, one call per step: route, identify + ingest, project, forward, relay,
record (compaction is started from project).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request

from policies.base import Projection

from . import identify
from .compaction import CompactionJob
from .config import Policy, Route
from .errors import NotFound, ProxyError, UpstreamTimeout
from .history_cache import Remembered
from .http import RawResponse, client_api_key, read_body
from .ingest import Ingested, append_response, ingest
from .ledger import call_cost
from .protocols.base import StreamObserver, Wire
from .relay import StreamOutcome, StreamRelay
from .services import Services
from .store.base import CallRecord, ConversationGone, StoreError
from .upstream.http import CREDENTIAL_HEADERS, UpstreamResponse, upstream_request_headers
from .upstream.litellm import usage_from_litellm

log = logging.getLogger("ctxproxy")

DEGRADED_HEADER = "X-Ctxproxy-Degraded"


def endpoint(wire: Wire) -> Callable[[Request], Awaitable[Any]]:
    async def handle_wire(request: Request) -> Any:
        return await handle(request, wire)

    return handle_wire


async def handle(request: Request, wire: Wire) -> Any:
    state: Services = request.app.state.ctx
    config = state.config
    t0 = time.monotonic()
    started = time.time()

    raw = await read_body(request, config.limits)
    body = wire.parse(raw)
    model, stream = wire.envelope(body)
    messages = wire.messages(body)

    route = config.route_for(wire.path, model)
    if route is None:
        raise NotFound(
            f"No route serves model {model!r} on {wire.path}. Configured routes: "
            + ", ".join(f"{r.name} (model {r.match.model})" for r in config.routes)
            + ".",
            param="model",
            code="model_not_found",
        )

    tenant = identify.tenant_of(client_api_key(request.headers), state.salt)
    prefix, history = identify.split_prefix(messages)
    # Messages equal to an earlier accepted request were validated, hashed and counted then.
    known = state.history.lookup(tenant, history)
    wire.validate(messages, 0, len(prefix))
    wire.validate(messages, len(prefix) + (len(known.messages) if known else 0))
    hashes = state.history.hashes(tenant, history, known)
    remembered = Remembered(history, hashes, 2 * len(raw))  # the bodies and their encodings
    header = config.conversation_header
    policy = config.policy_for(route)
    try:
        ingested = await ingest(state.store, tenant, prefix, history, hashes, request.headers.get(header))
        state.history.remember(tenant, remembered)
        identity = ingested.identity
        call = CallRecord(
            id="call_" + secrets.token_hex(10),
            tenant=tenant,
            route=route.name,
            model=model,
            purpose="main",
            stream=stream,
            started_at=started,
            conversation_id=identity.conversation_id,
            branch_id=identity.branch_id,
            system_hash=ingested.system_hash,
            tools_hash=await _store_blob(state, body.get("tools")),
        )
        await _store_blob(state, ingested.prefix, ingested.system_hash)

        sent_messages = messages
        if policy.rewrite and getattr(wire, "rewrite_allowed", _always)(body):
            projection = await _project(
                # A litellm route's window and prices are its provider model's, whatever the client calls it.
                state,
                wire,
                route,
                policy,
                route.upstream.model or model,
                body,
                ingested,
                _summary_auth(state, wire, route, request),
                known,
                remembered,
            )
            call.projection = projection.record.summary_dict()
            if _rewritten(projection):
                sent_messages = projection.messages
    except StoreError as exc:
        if policy.store_failure != "passthrough" or isinstance(exc, ConversationGone):
            raise
        return await _passthrough(state, wire, route, request, raw, body, stream, exc)
    encoded, remembered.encoded = wire.encode(
        body, None if sent_messages is messages else sent_messages, stream, known.encoded if known else None
    )
    payload = raw if encoded is None else encoded  # None: the client's bytes go upstream as they are
    key = state.upstream_key(route)
    headers = upstream_request_headers(
        request.headers, wire.auth_headers(key) if key else None, frozenset({header.lower()})
    )
    echo = [(header, identity.external_id or identity.conversation_id)]

    try:
        upstream = await state.upstream.send(route, "POST", wire.upstream_path, payload, headers)
    except ProxyError as exc:
        call.error = exc.message
        call.latency_ms = _ms(time.monotonic() - t0)
        await _record(state, call, wire, _error_kind(exc))
        raise

    if stream and upstream.status == 200 and wire.is_stream(upstream.content_type):
        observer = wire.observer(body)

        async def finish(outcome: StreamOutcome) -> None:
            await _finish_stream(state, wire, call, ingested, upstream, observer, outcome, t0)

        return StreamRelay(upstream, observer, finish, echo)
    return await _relay_whole(state, wire, call, ingested, upstream, t0, echo)


async def _passthrough(
    state: Services,
    wire: Wire,
    route: Route,
    request: Request,
    raw: bytes,
    body: dict[str, Any],
    stream: bool,
    exc: StoreError,
) -> Any:
    """`store_failure: passthrough`: the store is down, so relay the client's request unrewritten,
    record nothing, and say so in a response header."""
    log.warning("store unavailable on %s (route %s); relaying unrewritten: %s", wire.path, route.name, exc)
    state.metrics.observe_store_passthrough(route.name)
    encoded, _ = wire.encode(body, None, stream, None)
    key = state.upstream_key(route)
    headers = upstream_request_headers(
        request.headers,
        wire.auth_headers(key) if key else None,
        frozenset({state.config.conversation_header.lower()}),
    )
    degraded = [(DEGRADED_HEADER, "store-unavailable")]
    upstream = await state.upstream.send(
        route, "POST", wire.upstream_path, raw if encoded is None else encoded, headers
    )
    if stream and upstream.status == 200 and wire.is_stream(upstream.content_type):
        return StreamRelay(upstream, wire.observer(body), _unrecorded, degraded)
    try:
        data = await upstream.read()
    finally:
        upstream.close()
    return RawResponse(data, upstream.status, [*upstream.headers, *degraded])


async def _unrecorded(outcome: StreamOutcome) -> None:
    return None


def _always(body: Any) -> bool:
    return True


def _never() -> None:
    return None


def _summary_auth(state: Services, wire: Wire, route: Route, request: Request) -> dict[str, str]:
    """Credentials for a summarizer call on the route's upstream: the route's key, else the
    client's own (held in memory for the job only, never stored)."""
    key = state.upstream_key(route)
    if key is not None:
        return wire.auth_headers(key)
    return {k: v for k, v in request.headers.items() if k.lower() in CREDENTIAL_HEADERS}


def _rewritten(projection: Projection) -> bool:
    record = projection.record
    return bool(
        record.covered_through_seq or record.trimmed or record.pruned_seqs or record.orphan_seqs or record.repaired
    )


async def _project(
    state: Services,
    wire: Wire,
    route: Route,
    policy: Policy,
    model: str,
    body: dict[str, Any],
    ingested: Ingested,
    auth: dict[str, str],
    known: Remembered | None,
    remembered: Remembered,
) -> Projection:
    """Project with the active checkpoint; start a compaction when the plan asks for one, and
    wait for it (bounded) only when the request could not be served without dropping history."""
    identity = ingested.identity
    checkpoint = await state.store.active_checkpoint(identity.branch_id)
    items = state.projector.items(ingested.history, ingested.hashes, state.projector.counter(model), known, remembered)
    args = (policy, model, body, ingested.prefix, items)
    projection = state.projector.project_request(*args, checkpoint, identity.branch_id)
    plan = projection.record.compaction
    if plan is None:
        return projection
    job = CompactionJob(
        tenant=identity.tenant,
        conversation_id=identity.conversation_id,
        branch_id=identity.branch_id,
        route=route,
        policy=policy,
        model=model,
        prefix=ingested.prefix,
        items=items,
        hashes=ingested.hashes,
        plan=plan,
        previous=checkpoint,
        client_auth=auth,
        wire=wire,
    )
    task = state.compactor.request(job)
    if task is None or not projection.record.pruned_seqs or policy.on_overflow != "wait":
        return projection
    try:
        committed = await asyncio.wait_for(asyncio.shield(task), policy.overflow_wait)
    except TimeoutError:
        committed = None
    if committed is None:
        return projection
    return state.projector.project_request(*args, committed, identity.branch_id)


def _calibrate(state: Services, call: CallRecord) -> None:
    """Feed what the upstream billed back into the estimate for the next call on this branch."""
    if call.projection is None or call.branch_id is None:
        return
    state.projector.calibrate(
        call.branch_id,
        call.projection.get("checkpoint_generation") or 0,
        call.projection.get("sent_tokens") or 0,
        call.usage.get("input_total"),
    )


async def _relay_whole(
    state: Services,
    wire: Wire,
    call: CallRecord,
    ingested: Ingested,
    upstream: UpstreamResponse,
    t0: float,
    echo: list[tuple[str, str]],
) -> RawResponse:
    call.upstream_status = upstream.status
    call.request_id = upstream.request_id
    call.ttfb_ms = _ms(time.monotonic() - t0)
    try:
        data = await upstream.read()
    except ProxyError as exc:
        call.error = exc.message
        call.latency_ms = _ms(time.monotonic() - t0)
        await _record(state, call, wire, _error_kind(exc, answering=True))
        raise
    finally:
        upstream.close()
    call.latency_ms = _ms(time.monotonic() - t0)
    status = upstream.status

    async def bookkeeping() -> None:
        # After the client has its answer: parse, store the response turn, write the record.
        parsed = _json_object(data)
        if status == 200 and parsed is not None:
            message, call.finish_reason, call.usage_raw = wire.response(parsed)
            call.response = message
            call.usage = wire.usage(call.usage_raw).to_dict()
            call.status = "complete"
            _calibrate(state, call)
            if message is not None:
                await _append_response(state, ingested, message, call.id)
        else:
            call.status = "error"
            call.error = data[:4000].decode("utf-8", errors="replace")
            call.usage = wire.usage(None).to_dict()
        kind = None if call.status == "complete" else (f"http_{status}" if status != 200 else "malformed")
        await _record(state, call, wire, kind)

    return RawResponse(data, status, [*upstream.headers, *echo], after=bookkeeping)


async def _finish_stream(
    state: Services,
    wire: Wire,
    call: CallRecord,
    ingested: Ingested,
    upstream: UpstreamResponse,
    observer: StreamObserver,
    outcome: StreamOutcome,
    t0: float,
) -> None:
    chunks = observer.chunks
    call.upstream_status = upstream.status
    call.request_id = upstream.request_id
    call.ttfb_ms = _ms(outcome.first_byte_at - t0) if outcome.first_byte_at else None
    call.latency_ms = _ms((outcome.ended_at or time.monotonic()) - t0)
    call.response = observer.message()
    call.finish_reason = observer.finish_reason()
    call.usage_raw = observer.usage_raw()
    call.usage = wire.usage(call.usage_raw).to_dict()
    failure = getattr(observer, "failure", _never)()
    if failure is not None and outcome.error is None:
        call.status, call.error = "error", failure
    elif observer.done and outcome.error is None:
        # The end reached the client; a disconnect after it is the client hanging up, not a loss.
        call.status = "complete"
    elif outcome.client_disconnected:
        call.status, call.error = "partial", f"client disconnected after {chunks} chunks"
    elif outcome.error is not None:
        call.status, call.error = ("partial" if chunks else "error"), outcome.error.message
    else:
        call.status = "partial"
        call.error = f"upstream closed the stream after {chunks} chunks without its end event"
    kind = None
    if outcome.error is not None:
        kind = _error_kind(outcome.error, answering=True)
    elif call.status != "complete" and not outcome.client_disconnected:
        kind = "stream_error" if failure is not None else "truncated"
    await _record(state, call, wire, kind)
    if call.status == "complete":
        _calibrate(state, call)
        if call.response is not None:
            await _append_response(state, ingested, call.response, call.id)


async def _append_response(state: Services, ingested: Ingested, message: dict[str, Any], call_id: str) -> None:
    try:
        await append_response(state.store, ingested, message, call_id)
    except StoreError as exc:
        # The conversation was deleted while the call ran, or the store failed after the answer
        # was already relayed: the client has its answer, the call record says what happened.
        log.warning("response of call %s not stored: %s", call_id, exc)


def _error_kind(exc: ProxyError, answering: bool = False) -> str:
    """The `kind` label of ctxproxy_upstream_errors_total for a failure raised by the hop:
    `timeout`, `connect` (no answer), `broken` (the answer broke off), else `http_<status>`."""
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    if exc.status == 502:
        return "broken" if answering else "connect"
    return f"http_{exc.status}"


async def _record(state: Services, call: CallRecord, wire: Wire | None = None, error_kind: str | None = None) -> None:
    """The one place a main call's record is finalized: cost, metrics, then the store."""
    route = next((r for r in state.config.routes if r.name == call.route), None)
    provider_model = route.upstream.model if route is not None else None
    if provider_model and call.usage_raw is not None:
        call.usage = usage_from_litellm(call.usage_raw).to_dict()  # litellm's cache writes are inside the input
    price_model = provider_model or call.model
    call.cost_usd = call_cost(call.usage, state.projector.catalog.info(price_model)) if price_model else None
    state.metrics.observe_call(call, wire.name if wire is not None else "unknown", error_kind)
    try:
        await state.store.record_call(call)
    except StoreError as exc:
        log.error("call record %s not stored: %s", call.id, exc)


async def _store_blob(state: Services, value: Any, digest: str | None = None) -> str | None:
    """System prefixes and tool definitions are stored once by content, referenced by calls."""
    if not value:
        return None
    data = json.dumps(value, sort_keys=True)
    digest = digest or identify.blob_hash(data)
    if state.known_blobs.add(digest):
        await state.store.put_blob(digest, data)
    return digest


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)

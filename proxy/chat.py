"""The orchestrator of every proxied model call, whatever the client API (the `Wire`).

`handle` reads as DESIGN's steps, one call each: route (`routing`), identify + ingest (`ingest`),
project (`projection`, which may start a compaction: `compaction`), forward (`upstream`), relay
(`relay` for streams, `http.RawResponse` for whole bodies), record (`record`). The response turn
and the call record are written together after the client has its answer; a request that got no
answer (an error status from the upstream, or a failure before one) is retracted from the
history instead (`ingest.reject`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from policies.base import Projection

from . import auth, identify, record, routing
from .config import Policy, Route
from .endpoints import relay_unchanged
from .errors import ConversationGone, ProxyError, StoreError
from .estimate import Prediction
from .http import Incoming, RawResponse, client_api_key, read_body
from .ingest import Ingested, answer_stored, ingest, reject, response_turn
from .overflow import Sent, recover
from .projection import Projected
from .protocols.base import Wire
from .recall.detour import detour
from .recall.tool import offered, with_tool
from .relay import StreamOutcome, StreamRelay, nothing, or_disconnect, read_or_disconnect
from .rolling import CompactionJob
from .services import Services
from .store.base import CallRecord
from .tail_parse import BodyMemo
from .types import Message
from .upstream.base import UpstreamResponse

log = logging.getLogger("ctxproxy")

DEGRADED_HEADER = "X-Ctxproxy-Degraded"


async def handle(services: Services, request: Incoming, wire: Wire) -> Any:
    config = services.config
    t0 = time.monotonic()
    started = time.time()

    raw = await read_body(request.headers, request.receive, config.limits)
    memo = BodyMemo(services.history, client_api_key(request.headers))
    body = wire.parse(raw, memo)
    model, stream = wire.envelope(body)
    messages = wire.messages(body, memo)
    route, policy = routing.route_for(config, wire.path, model)
    caller = auth.authenticate(services.keys, config, route, request.headers, services.salt)
    memo.commit()
    tenant = caller.tenant
    header = config.conversation_header
    ingested: Ingested | None = None
    try:
        session = identify.session_of(config.session_headers, request.headers, body.get("tools"))
        ingested = await ingest(
            services.store, services.history, wire, tenant, messages, request.headers.get(header), len(raw), session
        )
        services.metrics.observe_identity(ingested.lookup)
        # from here on every answer, errors included, names the conversation
        request.conversation = (header, _conversation_of(ingested))
        call = await _open_call(services, route, model, stream, body, ingested, started)
        rewriting = policy.rewrite and wire.rewrite_allowed(body)
        recalling = rewriting and offered(policy, wire.name, body, services.recalls_rejected, route.name, model)
        if recalling:
            body = with_tool(body, wire.name, policy.recall)  # before projecting: the tool counts in the budget
        # A litellm route's window and prices are its provider model's, whatever the client calls it.
        credentials = routing.summary_auth(services.keys, wire, route, request.headers, caller) if rewriting else {}
        outgoing = Outgoing(wire, route, policy, route.upstream.model or model, body, messages, raw, ingested)
        sent = Sent(call)
        payload = await outgoing.prepare(services, sent, rewriting, recalling, credentials)
    except StoreError as exc:
        if policy.store_failure != "passthrough" or isinstance(exc, ConversationGone):
            raise
        return await _passthrough(services, wire, route, request, raw, body, stream, exc, caller)
    except ProxyError:
        if ingested is not None:  # refused by the proxy itself (an impossible budget): nothing stays
            await _reject(services, ingested)
        raise
    echo = [(header, _conversation_of(ingested))]
    drop = frozenset({header.lower()})
    headers = routing.upstream_headers(services.keys, wire, route, request.headers, drop, caller)

    async def send(payload: bytes) -> UpstreamResponse | None:
        return await or_disconnect(
            request.receive, services.upstream.send(route, "POST", wire.upstream_path, payload, headers)
        )

    async def resend(retry: Sent) -> UpstreamResponse | None:
        try:
            return await send(await outgoing.prepare(services, retry, rewriting, recalling, credentials))
        except ProxyError as exc:  # not projected (an impossible budget, the store) or not sent
            await _refuse(services, wire, retry.call, outgoing.ingested, exc, t0)
            raise

    def redact(data: bytes) -> bytes:
        return services.keys.redact(data, client_api_key(request.headers))

    try:
        upstream = await send(payload)
    except ProxyError as exc:
        await _refuse(services, wire, sent.call, ingested, exc, t0)
        raise
    if upstream is not None:
        upstream, sent = await recover(services, wire, route, sent, upstream, resend, redact, rewriting)
    call, prediction = sent.call, sent.prediction
    if upstream is None:
        return await _client_left(services, wire, call, t0)
    if recalling:
        upstream, call, t0 = await detour(
            services, wire, route, policy, outgoing.body, outgoing.sent, call, upstream, headers, t0
        )

    if stream and upstream.status == 200 and wire.is_stream(upstream.content_type):
        observer = wire.observer(body)

        async def finish(outcome: StreamOutcome) -> None:
            kind = record.streamed(call, wire, upstream, observer, outcome, t0)
            await _close_call(services, wire, call, ingested, kind, prediction)

        return StreamRelay(upstream, observer, finish, echo)
    return await _relay_whole(services, wire, call, ingested, upstream, t0, echo, request, prediction)


class Outgoing:
    """What one client request sends upstream, projected again for each attempt (`prepare`)."""

    def __init__(
        self,
        wire: Wire,
        route: Route,
        policy: Policy,
        model: str,
        body: dict[str, Any],
        messages: list[Message],
        raw: bytes,
        ingested: Ingested,
    ) -> None:
        self.wire, self.route, self.policy, self.model = wire, route, policy, model
        self.body, self.messages, self.raw, self.ingested = body, messages, raw, ingested
        self.sent: list[Message] = messages

    async def prepare(
        self, services: Services, sent: Sent, rewriting: bool, recalling: bool, credentials: dict[str, str]
    ) -> bytes:
        """The bytes of `sent`'s attempt: the client's own, or the projection within the budget
        less `sent.cut`; the projection and prediction go to `sent` and its call record."""
        wire, ingested = self.wire, self.ingested
        stream = bool(self.body.get("stream"))
        self.sent = self.messages
        if rewriting:
            projected = await _project(
                services, wire, self.route, self.policy, self.model, self.body, ingested, credentials, sent.cut
            )
            projection = projected.projection
            sent.prediction, sent.limit, sent.output = projected.prediction, projected.limit, projected.output
            sent.call.projection = projected.summary()
            if sent.attempt > 1:
                sent.call.projection.update(attempt=sent.attempt, overflow_cut=sent.cut)
            if _rewritten(projection) or sent.cut:
                self.sent = wire.with_cache_point(
                    self.body, projection.messages, projection.cache_point, projection.previous_point
                )
        known = ingested.known.encoded if ingested.known else None
        outgoing = self.sent if recalling or self.sent is not self.messages else None
        encoded, ingested.remembered.encoded = wire.encode(self.body, outgoing, stream, known)
        return self.raw if encoded is None else encoded  # None: the client's bytes go upstream as they are


async def _refuse(
    services: Services, wire: Wire, call: CallRecord, ingested: Ingested, exc: ProxyError, t0: float
) -> None:
    """The request got no answer: its record says why, its events are retracted."""
    if call.error is None:
        record.failed(call, exc, t0)
    call.branch_id = None  # a rejected call is no branch's last call
    await services.recorder.finish(call, wire.name, record.error_kind(exc))
    await _reject(services, ingested)


async def _open_call(
    services: Services, route: Route, model: str, stream: bool, body: dict[str, Any], ingested: Ingested, started: float
) -> CallRecord:
    identity = ingested.identity
    call = services.recorder.open(identity.tenant, route, model, "main", stream, started)
    call.conversation_id, call.branch_id = identity.conversation_id, identity.branch_id
    call.system_hash = ingested.system_hash
    call.tools_hash = await services.recorder.blob(body.get("tools"))
    await services.recorder.blob(ingested.prefix, ingested.system_hash)
    return call


async def _project(
    services: Services,
    wire: Wire,
    route: Route,
    policy: Policy,
    model: str,
    body: dict[str, Any],
    ingested: Ingested,
    credentials: dict[str, str],
    cut: int = 0,
) -> Projected:
    """Project with the active checkpoint; start a compaction when the plan asks for one, and
    wait for it (bounded) only when the request could not be served without dropping history."""
    identity = ingested.identity
    projector = services.projector
    checkpoint = await services.store.active_checkpoint(identity.branch_id)
    items = projector.items(
        ingested.history, ingested.hashes, projector.counter(model), ingested.known, ingested.remembered
    )
    args = (policy, model, body, ingested.prefix, items)
    branch = identity.branch_id
    projected = projector.project_request(*args, checkpoint, branch, ingested.remembered, route=route, cut=cut)
    projection = projected.projection
    plan = projection.record.compaction
    if plan is None:
        return projected
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
        client_auth=credentials,
        wire=wire,
    )
    task = services.compactor.request(job)
    if task is None or not projection.record.pruned_seqs or policy.on_overflow != "wait":
        return projected
    try:
        committed = await asyncio.wait_for(asyncio.shield(task), policy.overflow_wait)
    except TimeoutError:
        committed = None
    if committed is None:
        return projected
    return projector.project_request(*args, committed, branch, ingested.remembered, route=route, cut=cut)


async def _relay_whole(
    services: Services,
    wire: Wire,
    call: CallRecord,
    ingested: Ingested,
    upstream: UpstreamResponse,
    t0: float,
    echo: list[tuple[str, str]],
    request: Incoming,
    prediction: Prediction | None,
) -> Any:
    call.upstream_status = upstream.status
    call.request_id = upstream.request_id
    call.ttfb_ms = record.ms(time.monotonic() - t0)
    try:
        data = await read_or_disconnect(request.receive, upstream)
    except ProxyError as exc:
        record.failed(call, exc, t0)
        call.branch_id = None
        await services.recorder.finish(call, wire.name, record.error_kind(exc, answering=True))
        await _reject(services, ingested)
        raise
    finally:
        upstream.close()
    if data is None:
        return await _client_left(services, wire, call, t0)
    call.latency_ms = record.ms(time.monotonic() - t0)
    status = upstream.status
    if status >= 400:
        # An upstream that echoes the key it was sent: the operator's, or the caller's own when
        # it was forwarded (the records and logs must not hold it either).
        data = services.keys.redact(data, client_api_key(request.headers))

    async def bookkeeping() -> None:
        # After the client has its answer: parse, store the response turn, write the record.
        await _close_call(services, wire, call, ingested, record.answered(call, wire, status, data), prediction)

    return RawResponse(data, status, [*services.keys.redact_headers(upstream.headers), *echo], after=bookkeeping)


async def _client_left(services: Services, wire: Wire, call: CallRecord, t0: float) -> Any:
    record.client_left(call, t0)
    await services.recorder.finish(call, wire.name)
    return nothing


async def _close_call(
    services: Services,
    wire: Wire,
    call: CallRecord,
    ingested: Ingested,
    error_kind: str | None,
    prediction: Prediction | None = None,
) -> None:
    """Write the record; an accepted request joins the history in the same write (with its answer
    when complete, which also calibrates the estimate), a rejected one is retracted."""
    if call.upstream_status is None or not 200 <= call.upstream_status < 300:
        call.branch_id = None  # a rejected call is no branch's last call
        await services.recorder.finish(call, wire.name, error_kind)
        await _reject(services, ingested)
        return
    turn = response_turn(ingested, call.response if call.status == "complete" else None, call.id)
    answer_stored(ingested, turn, await services.recorder.finish(call, wire.name, error_kind, turn))
    if (
        call.status == "complete"
        and prediction is not None
        and call.projection is not None
        and call.branch_id is not None
        and "recall_rounds" not in call.projection
    ):
        # What the upstream billed (normalized by `finish`) is what it counted: the next call on
        # this branch carries it, and the route's statistics learn from it.
        services.projector.estimator.observe(prediction, call.usage.get("input_total"))


async def _reject(services: Services, ingested: Ingested) -> None:
    try:
        await reject(services.store, ingested)
    except StoreError as exc:
        log.warning("events of a rejected request in conversation %s kept: %s", ingested.identity.conversation_id, exc)


async def _passthrough(
    services: Services,
    wire: Wire,
    route: Route,
    request: Incoming,
    raw: bytes,
    body: dict[str, Any],
    stream: bool,
    exc: StoreError,
    caller: auth.Caller,
) -> Any:
    """`store_failure: passthrough`: the store is down, so relay the client's request unrewritten,
    record nothing, and say so in a response header."""
    log.warning("store unavailable on %s (route %s); relaying unrewritten: %s", wire.path, route.name, exc)
    services.metrics.observe_store_passthrough(route.name)
    encoded, _ = wire.encode(body, None, stream, None)
    drop = frozenset({services.config.conversation_header.lower()})
    headers = routing.upstream_headers(services.keys, wire, route, request.headers, drop, caller)
    degraded = [(DEGRADED_HEADER, "store-unavailable")]
    payload = raw if encoded is None else encoded
    upstream = await services.upstream.send(route, "POST", wire.upstream_path, payload, headers)
    if stream and upstream.status == 200 and wire.is_stream(upstream.content_type):
        return StreamRelay(upstream, wire.observer(body), _unrecorded, degraded)
    return await relay_unchanged(services.keys, upstream, degraded)


async def _unrecorded(outcome: StreamOutcome) -> None:
    return None


def _conversation_of(ingested: Ingested) -> str:
    return ingested.identity.external_id or ingested.identity.conversation_id


def _rewritten(projection: Projection) -> bool:
    done = projection.record
    return bool(done.covered_through_seq or done.trimmed or done.pruned_seqs or done.orphan_seqs or done.repaired)

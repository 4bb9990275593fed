"""The orchestrator of every proxied model call, whatever the client API (the `Wire`).

`handle` reads as DESIGN's steps, one call each: route (`routing`), identify + ingest (`ingest`),
project (`outgoing`, which may start a compaction: `compaction`), forward (`Exchange.send`,
recovering from an overflow: `overflow`; answering recall calls: `recall.detour`), relay (`relay`
for streams, `http.RawResponse` for whole bodies), record (`record`). The request's calls share
one `Exchange`, which ends a call that got no answer in one place. The response turn and the
call record are written together after the client has its answer; a request that got no answer
(an error status from the upstream, or a failure before one) is retracted from the history
instead (`settle.reject`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from . import auth, identify, modes, record, routing, stored_counts
from .asgi import Incoming, RawResponse, read_body
from .cache_key import conversation_key
from .config import Route
from .errors import ConversationGone, ProxyError, StoreError
from .exchange import Exchange, retract
from .ingest import Arrival, Ingested, ingest
from .last_sent import SharedPrompt, near_trigger
from .memory.access import recollect
from .outgoing import Outgoing
from .overflow import recover
from .protocols.base import Target, Wire
from .recall.detour import detour
from .recall.tool import offered, with_tool
from .relay import StreamOutcome, StreamRelay, nothing, read_or_disconnect, relay_unchanged
from .services import Services
from .settle import answer_stored, response_turn
from .shadow.runner import Sample
from .store.base import CallRecord
from .tail_parse import BodyMemo
from .tools import proxy_tools
from .upstream.base import UpstreamResponse

log = logging.getLogger("ctxproxy")

DEGRADED_HEADER = "X-Ctxproxy-Degraded"


async def handle(services: Services, request: Incoming, wire: Wire, target: Target | None = None) -> Any:
    """`target`: what the request's path says (`Wire.target`), where the API puts the model there."""
    config = services.config
    started = time.time()

    raw = await read_body(request.headers, request.receive, config.limits)
    presented = wire.client_key(request.headers, request.query)
    memo = BodyMemo(services.history, presented)
    body = wire.parse(raw, memo)
    model, stream = wire.envelope(body, target)
    messages = wire.messages(body, memo)
    route, policy = routing.route_for(config, wire.path, model)
    caller = await auth.caller_of(services, route, presented)
    mode = modes.mode_of(request.headers, route, policy)  # a refused mode: nothing stored or sent
    # a spent budget or a rate limit: nothing stored or sent
    await services.admission.admit(caller.tenant, caller.account)
    memo.commit()
    tenant = caller.tenant
    header = config.conversation_header
    drop = frozenset({header.lower()})  # and every X-Ctxproxy-* header (`upstream_request_headers`)
    ingested: Ingested | None = None
    try:
        session = identify.session_of(config.session_headers, request.headers, body.get("tools"))
        # A litellm route's window and prices are its provider model's, whatever the client calls it.
        provider_model = route.upstream.model or model
        counter = stored_counts.storing(services.projector.counter(provider_model))
        arrival = Arrival(tenant, messages, request.headers.get(header), len(raw), session, counter)
        ingested = await ingest(services.store, services.history, wire, arrival)
        services.metrics.observe_identity(ingested.lookup, ingested.fork, ingested.matched_by)
        # from here on every answer, errors included, names the conversation
        request.reported = _reported(header, ingested, None, mode)
        purpose = ingested.purpose if wire.purpose == "main" else wire.purpose
        kind = (wire, purpose, stream, caller.key)
        call = await _open_call(services, route, model, kind, body, ingested, started)
        exchange = Exchange(services, wire, route, policy, request, ingested, call)
        projectable = routing.projectable(policy, wire, body)
        rewriting = projectable and mode is None
        recall = projectable and offered(policy, wire, body, services.recalls_rejected, route.name, model)
        identity = ingested.identity
        where = (identity.conversation_id, identity.branch_id)
        memory = (
            recollect(
                policy, services.store, tenant, caller.client, request.headers, where, ingested.prefix, ingested.history
            )
            if rewriting
            else None
        )
        tools = proxy_tools(services, policy, wire, body, (route.name, model), recall, memory) if rewriting else None
        if policy.prompt_cache_key and mode is None and not routing.deferred(policy, wire, body):
            key = conversation_key(tenant, ingested.identity.conversation_id)
            body, raw = wire.with_cache_key(body, raw, key)
        original = body  # the client's request as a shadow call sends it again (`proxy/shadow/`)
        if tools is not None:
            body = tools.with_tools(body, wire)  # before projecting: the tools count in the budget
        observing = None
        if projectable and mode == "observe":  # the body the projection would have been made for
            observing = with_tool(body, wire, policy.recall) if recall else body
        credentials = (
            routing.summary_auth(services.keys, wire, route, request.headers, caller, request.query)
            if rewriting
            else None
        )
        detouring = tools is not None
        outgoing = Outgoing(
            exchange, provider_model, body, messages, raw, credentials, detouring, mode, observing, memory
        )
        payload = await outgoing.prepare()
    except StoreError as exc:
        if policy.store_failure != "passthrough" or isinstance(exc, ConversationGone):
            raise
        headers = routing.upstream_headers(services.keys, wire, route, request.headers, drop, caller, request.query)
        return await _passthrough(services, Unstored(wire, route, headers, raw, body, (model, stream)), exc)
    except ProxyError:
        if ingested is not None:  # refused by the proxy itself (an impossible budget): nothing stays
            await retract(services, ingested, request)
        raise
    request.reported = _reported(header, ingested, exchange.call.projection, mode)
    exchange.headers = routing.upstream_headers(
        services.keys, wire, route, request.headers, drop, caller, request.query
    )
    if services.shadows.wants(route.policy, policy, ingested.identity.conversation_id, ingested.hashes):
        offered_tools = (tools is not None and recall, memory is not None)
        exchange.shadow = _sample(exchange, provider_model, original, outgoing, offered_tools)

    async def resend() -> UpstreamResponse | None:
        try:
            payload = await outgoing.prepare()
        except ProxyError as exc:  # not projected again (an impossible budget, the store)
            await exchange.fail(exc)
            raise
        return await exchange.send(payload)

    upstream = await exchange.send(payload)
    if upstream is not None:
        upstream = await recover(exchange, upstream, resend, rewriting)
    if upstream is not None and tools is not None:
        upstream = await detour(exchange, outgoing.body, outgoing.sent, upstream, tools)
    if upstream is None:
        return await _client_left(exchange)
    # what the answer says about the request: its conversation, and what the call that answered sent
    echo = request.reported = _reported(header, ingested, exchange.call.projection, mode)
    if stream and upstream.status == 200 and wire.is_stream(upstream.content_type):
        observer = wire.observer(body)
        call, t0, answer = exchange.call, exchange.t0, upstream

        async def finish(outcome: StreamOutcome) -> None:
            await _close_call(exchange, record.streamed(call, wire, answer, observer, outcome, t0))

        return StreamRelay(upstream, observer, finish, echo)
    return await _relay_whole(exchange, upstream, echo)


async def _open_call(
    services: Services,
    route: Route,
    model: str,
    kind: tuple[Wire, str, bool, str | None],
    body: dict[str, Any],
    ingested: Ingested,
    started: float,
) -> CallRecord:
    """The call's record, opened as `kind` (its wire, its purpose, whether streamed, the client key)."""
    wire, purpose, stream, client = kind
    call = services.recorder.open(ingested.identity.tenant, route, wire, model, purpose, stream, started, client)
    tools_hash = await services.recorder.blob(body.get("tools"))
    identity = ingested.identity
    record.attach(call, identity.conversation_id, identity.branch_id, ingested.system_hash, tools_hash)
    await services.recorder.blob(ingested.prefix, ingested.system_hash)
    return call


async def _relay_whole(exchange: Exchange, upstream: UpstreamResponse, echo: list[tuple[str, str]]) -> Any:
    call, services = exchange.call, exchange.services
    record.arrived(call, upstream, exchange.t0)
    try:
        data = await read_or_disconnect(exchange.request.receive, upstream)
    except ProxyError as exc:
        await exchange.fail(exc, answering=True)
        raise
    finally:
        upstream.close()
    if data is None:
        return await _client_left(exchange)
    status = upstream.status
    if status >= 400:
        # An upstream that echoes the key it was sent: the operator's, or the caller's own when
        # it was forwarded (the records and logs must not hold it either).
        data = exchange.redact(data)
    kind = record.answered(call, exchange.wire, status, data, exchange.t0)

    async def bookkeeping() -> None:
        # After the client has its answer: store the response turn, write the record.
        await _close_call(exchange, kind)

    return RawResponse(data, status, [*services.keys.redact_headers(upstream.headers), *echo], after=bookkeeping)


async def _client_left(exchange: Exchange) -> Any:
    record.client_left(exchange.call, exchange.t0)
    await exchange.finish(exchange.call)
    return nothing


async def _close_call(exchange: Exchange, error_kind: str | None) -> None:
    """Write the record; an accepted request joins the history in the same write (with its answer
    when complete, which also teaches the estimate), a rejected one is retracted."""
    call, services, ingested = exchange.call, exchange.services, exchange.ingested
    if call.upstream_status is None or not 200 <= call.upstream_status < 300:
        await exchange.rejected(call, error_kind)  # a rejected call is no branch's last call
        return
    answer = call.response if call.status == "complete" else None
    turn = response_turn(ingested, answer, call.id, exchange.wire.purpose == "main")
    answer_stored(ingested, turn, await services.recorder.finish(call, exchange.wire, error_kind, turn))
    if exchange.shadow is not None:  # the client has its answer: its twin may go now, in the background
        services.shadows.start(exchange.shadow, call)
    _keep_shared(exchange, call)
    prediction = exchange.attempt.prediction
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


def _keep_shared(exchange: Exchange, call: CallRecord) -> None:
    """An answered request, as it went upstream, becomes its branch's prompt for a shared summary
    (`summarizer.mode: shared`, and `auto` where it resolves to it): the provider has cached it.
    A request with recall rounds is not one: its last round's messages were not these. Nor is one
    far from its compaction trigger (`proxy.last_sent.NEAR`): no compaction will ask it, so the
    branch keeps none."""
    if exchange.policy.summarizer.resolved(litellm=bool(exchange.route.upstream.model)) != "shared":
        return
    billed = call.usage.get("input_total") if call.usage else None
    projection = call.projection or {}
    ingested = exchange.ingested
    branch = ingested.identity.branch_id
    prompts = exchange.services.compactor.shared
    if (
        exchange.sent is None
        or call.status != "complete"
        or "recall_rounds" in projection
        or not isinstance(billed, int)
    ):
        return
    if not near_trigger(projection):
        prompts.forget(branch)  # what it kept is no longer its last answered request
        return
    body, messages = exchange.sent
    size = exchange.sent_bytes
    prompts.remember(
        branch, SharedPrompt(exchange.wire.name, body, messages, exchange.headers, billed, ingested.position.seq, size)
    )


def _sample(
    exchange: Exchange, model: str, original: dict[str, Any], outgoing: Outgoing, tools: tuple[bool, bool]
) -> Sample:
    """The request's shadow pair, sampled: its client request (`original`) and what it sent."""
    ingested = exchange.ingested
    first_seq = ingested.position.seq - len(ingested.history) + 1
    route, policy, wire, headers = exchange.route, exchange.policy, exchange.wire, exchange.headers
    where = (ingested.history, first_seq)
    return Sample(policy, route, wire, model, original, headers, *where, outgoing, tools, exchange.redact)


@dataclass(frozen=True)
class Unstored:
    """A request relayed while the store is down: where it goes and what it is."""

    wire: Wire
    route: Route
    headers: dict[str, str]
    raw: bytes
    body: dict[str, Any]
    asked: tuple[str, bool]
    """the model and whether a stream was asked for"""


async def _passthrough(services: Services, request: Unstored, exc: StoreError) -> Any:
    """`store_failure: passthrough`: the store is down, so relay the client's request unrewritten,
    record nothing, and say so in a response header."""
    wire, route, body, headers = request.wire, request.route, request.body, request.headers
    model, stream = request.asked
    log.warning("store unavailable on %s (route %s); relaying unrewritten: %s", wire.path, route.name, exc)
    services.metrics.observe_store_passthrough(route.name)
    encoded, _ = wire.encode(body, None, stream, None)
    degraded = [(DEGRADED_HEADER, "store-unavailable")]
    payload = request.raw if encoded is None else encoded
    path = wire.upstream_path_for(model, stream)
    upstream = await services.upstream.send(route, "POST", path, payload, headers, wire, stream)
    if stream and upstream.status == 200 and wire.is_stream(upstream.content_type):
        return StreamRelay(upstream, wire.observer(body), _unrecorded, degraded)
    return await relay_unchanged(services.keys, upstream, degraded)


async def _unrecorded(outcome: StreamOutcome) -> None:
    return None


def _conversation_of(ingested: Ingested) -> str:
    return ingested.identity.external_id or ingested.identity.conversation_id


def _reported(
    header: str, ingested: Ingested, projection: dict[str, Any] | None, mode: str | None
) -> list[tuple[str, str]]:
    """The headers of every answer to the request once its conversation is known: the
    conversation header (the client's own id, else the proxy's) and `modes.call_headers`."""
    identity = ingested.identity
    described = modes.call_headers(identity.conversation_id, identity.branch_id, projection, mode)
    return [(header, _conversation_of(ingested)), *described]

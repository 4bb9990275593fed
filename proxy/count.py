"""Count a request's input as ctxproxy would send it (Anthropic's `count_tokens`, the Responses
API's `input_tokens`, Gemini's `countTokens`).

Problem: an agent sizes its own compaction from these endpoints (and from the usage of its
calls). Relayed unchanged they count the history the agent holds, not what the proxy sends for
it, so the agent compacts long before the window is near: it would feel a window the proxy
already keeps it inside.

So the answer is the input of the request a model call with this body would send: the
conversation found by `ingest.locate` (the rules of `ingest`, read-only: nothing is appended,
forked or created, no compaction starts), projected by the route's policy with the branch's
active checkpoint (`Projector.project_request`, as `outgoing` does), the recall and memory tools
added when the call would get them, and the memory block after the prefix. Then counted, best source first:

* carried: when the projection starts with the very messages of the branch's last billed call,
  the prediction the budget works with (`proxy.estimate`): that bill, exact, plus the learned
  ratio times the estimate of what was added. The proxy's own budget and the agent then agree
  on the same number, and no upstream call is made (agents count often; counting has its own
  rate limits upstream).
* otherwise (nothing stored yet, a new checkpoint, a moved trim boundary: no bill covers the
  prefix), the upstream's own count of the projected body: an estimate of the whole would be
  the learned ratio times tiktoken, 10-20% off on another tokenizer until calibrated, where the
  upstream's count is what it will bill.
* an upstream without the endpoint, or one that fails (not a 4xx about the body): the
  prediction, ratio times estimate.

A route that does not rewrite (or a body the wire may not rewrite) is relayed as it always was:
what the upstream counts is what it will be sent; so is every body while the store is down on a
route whose `store_failure` is `passthrough` (its model calls go upstream unrewritten too). A
body that would be refused as too long even projected gets the 400 the call would get. Nothing
is recorded.

Example: Claude Code holds 90,000 tokens of history on a 32k route whose last call was billed
21,400 for a summary and a raw tail; it appends a 1,200-token tool result and counts. The answer
is 21,400 + 1.08 x 1,150 = 22,642, not 91,300.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive

from . import auth, identify, routing
from .asgi import read_body
from .codec import JsonRejected, loads
from .errors import StoreError, UpstreamError
from .ingest import Arrival, locate
from .memory.access import recollect
from .projector import Asked, Projected
from .protocols.base import Target, Wire
from .recall.tool import offered
from .services import Services
from .tools import proxy_tools
from .upstream.base import UpstreamResponse

FALLBACK_STATUSES = frozenset({404, 405, 501})
"""Upstream answers that say it has no counting endpoint (the prediction answers instead)."""


@dataclass(frozen=True)
class Counted:
    """A count: `tokens` and where they came from (`carried`, `upstream`, `estimated`), or the
    upstream's own answer to relay (a route that does not rewrite, an error about the body)."""

    tokens: int | None
    source: str
    relayed: UpstreamResponse | None = None


async def count(
    services: Services,
    headers: Mapping[str, str],
    receive: Receive,
    wire: Wire,
    where_from: tuple[Target, Mapping[str, str]],
) -> Counted:
    """The input tokens of the model call this body would make (module docstring); `where_from`:
    what the counting path says (`Wire.count_target`) and the query string's parameters."""
    target, query = where_from
    config = services.config
    raw = await read_body(headers, receive, config.limits)
    body = wire.count_body(wire.parse(raw))
    model, _ = wire.envelope(body, target)
    route, policy = routing.route_for(config, wire.path, model)
    caller = await auth.caller_of(services, route, wire.client_key(headers, query))
    header = config.conversation_header
    upstream_headers = routing.upstream_headers(
        services.keys, wire, route, headers, frozenset({header.lower()}), caller, query
    )
    path = wire.upstream_count_path_for(model)
    assert path is not None, f"{wire.name} has no counting endpoint"
    if not routing.projectable(policy, wire, body):
        return Counted(None, "relayed", await services.upstream.send(route, "POST", path, raw, upstream_headers))

    messages = wire.messages(body)
    session = identify.session_of(config.session_headers, headers, body.get("tools"))
    arrival = Arrival(caller.tenant, messages, headers.get(header), len(raw), session)
    try:
        located = await locate(services.store, services.history, wire, arrival)
        checkpoint = await services.store.active_checkpoint(located.branch_id) if located.branch_id else None
    except StoreError:
        if policy.store_failure != "passthrough":
            raise
        return Counted(None, "relayed", await services.upstream.send(route, "POST", path, raw, upstream_headers))
    if checkpoint is not None and checkpoint.covered_through_seq > located.matched:
        checkpoint = None  # it summarizes events this request does not have
    where = (located.conversation_id, located.branch_id)
    memory = recollect(
        policy, services.store, caller.tenant, caller.client, headers, where, located.prefix, located.history
    )
    recall = offered(policy, wire, body, services.recalls_rejected, route.name, model)
    tools = proxy_tools(services, policy, wire, body, (route.name, model), recall, memory)
    if tools is not None:
        body = tools.with_tools(body, wire)  # the call would carry them: they count
    window_model = route.upstream.model or model
    projector = services.projector
    counter = projector.counter(window_model)
    items = projector.items(located.history, located.hashes, counter, located.known)
    block = await memory.block(checkpoint, counter.count_text) if memory is not None else None
    prefix = [*located.prefix, block] if block is not None else located.prefix
    asked = Asked(policy, window_model, body, prefix, items, located.branch_id, None, route, wire.name)
    projected = projector.project_request(asked, checkpoint)
    prediction = projected.prediction
    if prediction is not None and prediction.carried:
        return Counted(prediction.predicted, "carried")
    payload = _payload(wire, (body, model), raw, projected, tools is not None or block is not None)
    try:
        upstream = await services.upstream.send(route, "POST", path, payload, upstream_headers)
    except UpstreamError:
        return _estimated(projected)
    if upstream.status in FALLBACK_STATUSES or upstream.status >= 500:
        upstream.close()
        return _estimated(projected)
    if upstream.status != 200:
        return Counted(None, "relayed", upstream)
    try:
        tokens = _input_tokens(wire, await upstream.read())
    finally:
        upstream.close()
    return Counted(tokens, "upstream") if tokens is not None else _estimated(projected)


def _payload(wire: Wire, call: tuple[dict[str, Any], str], raw: bytes, projected: Projected, added: bool) -> bytes:
    """The body the model call of `call` (its body and model) would send (`added`: with the
    proxy's tools or memory block), as the counting endpoint takes it; the client's own counting
    body when it goes unchanged."""
    body, model = call
    projection = projected.projection
    messages = projection.messages if projection.record.rewritten or added else None
    encoded, _ = wire.encode(body, messages, False, None)
    return raw if encoded is None else wire.count_request(encoded, model)


def _estimated(projected: Projected) -> Counted:
    prediction = projected.prediction
    tokens = prediction.predicted if prediction is not None else projected.projection.record.sent_tokens
    return Counted(tokens, "estimated")


def _input_tokens(wire: Wire, data: bytes) -> int | None:
    try:
        parsed = loads(data)
    except JsonRejected:
        return None
    tokens = wire.counted_tokens(parsed)
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None

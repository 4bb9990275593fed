"""The detour: answer the model's recall calls and call upstream again until it answers otherwise.

At most `max_rounds` consumed answers; the last follow-up goes without the tool, so the model has to
answer. Each follow-up is the same request plus, per round, the assistant turn with its recall
calls and their results (`Wire.detour_turn`, `Wire.tool_result`); it is encoded by the client's
wire, so tool pairing is the wire's own (a chat `tool_calls` + `tool` messages, an Anthropic
`tool_use` + `tool_result`, a Responses `function_call` + `function_call_output` by `call_id`).
The final answer's call record is the `main` one, marked with `recall_rounds` in its projection
record so the estimate is not calibrated with a request the projection did not build.

The follow-ups stay inside the window: the room the projection left (`input_budget` -
`sent_tokens` of its record) pays for each round's assistant turn and results, so a result gets
at most its share of what is left (and says so when nothing is).

Before any of that: an upstream that answers the request carrying the tool with a 400 (not a
context overflow: `proxy.overflow` has handled those, and the tool was not their reason) gets it
once more without the proxy's tools (`Toolbox.without_tools`); when that is accepted, the route and model are
marked for `recall.rejected_seconds` (`memory.RejectedTool`) and the rejected call is a `recall`
record saying why.
"""

from __future__ import annotations

import json

from .. import record, tracing
from ..exchange import Exchange
from ..store.base import CallRecord
from ..types import Json, Message
from ..upstream.base import UpstreamResponse
from ..upstream.classify import classify
from .read import read_recorded, read_stream, read_whole
from .toolbox import Toolbox

FRAMING_TOKENS = 16
"""What a tool result block / message adds around its text, generously."""
REJECTED = "upstream rejected the request carrying the recall tool (HTTP 400): {detail}; retried without the tool"


class Detour:
    """One request's recall rounds: the follow-up messages so far and how many rounds ran."""

    def __init__(self, exchange: Exchange, body: Json, messages: list[Message], tools: Toolbox) -> None:
        self.exchange, self.body, self.messages, self.tools = exchange, body, messages, tools
        call = exchange.call
        self.branch, self.model = call.branch_id or "", call.model or ""
        self.rounds = 0
        projection = call.projection or {}
        budget, sent = projection.get("input_budget"), projection.get("sent_tokens")
        self.room = budget - sent if isinstance(budget, int) and isinstance(sent, int) else None
        """Input tokens the follow-ups may still add within the window (None: unknown, not rewritten)."""

    def more(self) -> bool:
        return self.rounds < self.tools.max_rounds

    async def follow_up(self, message: Message) -> bytes | None:
        """The next request: this one plus `message`'s calls of the proxy's tools and their results."""
        services, wire = self.exchange.services, self.exchange.wire
        self.rounds += 1
        services.metrics.observe_recall(self.exchange.route.name, "round")
        events = await services.store.lineage_events(self.branch, 0, 1 << 30)
        count = services.projector.counter(self.model).count_text
        calls = self.tools.calls(message)
        turn = wire.detour_turn(message, self.tools.names)
        limit = None
        if self.room is not None:
            self.room -= count(json.dumps(turn, ensure_ascii=False)) + FRAMING_TOKENS * len(calls)
            limit = self.room // max(1, len(calls))
        with tracing.span("ctxproxy.recall", **{"ctxproxy.recall.round": self.rounds}):
            results = [wire.tool_result(c, await self.tools.answer(c, events, count, limit)) for c in calls]
        if self.room is not None:
            self.room -= sum(count(str(r["content"])) for r in results)
        self.messages = [*self.messages, turn, *results]
        body = self.body if self.more() else self.tools.without_tools(self.body, wire)
        payload, _ = wire.encode(body, self.messages, self.exchange.call.stream, None)
        return payload

    async def next_answer(self, message: Message) -> UpstreamResponse:
        """For a stream already relaying: the follow-up's answer (its record is the relay's)."""
        return await self.exchange.open(await self.follow_up(message))


async def detour(
    exchange: Exchange, body: Json, messages: list[Message], upstream: UpstreamResponse, tools: Toolbox
) -> UpstreamResponse | None:
    """Answer the model's recall calls until it answers otherwise (bounded); the upstream answer
    to relay (its record: `exchange.call`), None when the client left. Raises ProxyError as
    `Exchange.send` does."""
    wire = exchange.wire
    if upstream.status == 400:
        data = upstream.in_memory()
        if data is not None and classify(400, data).kind == "overflow":
            return upstream  # retried as far as it goes (`proxy.overflow`): relayed
        return await _without_tool(exchange, body, messages, upstream, tools)
    rounds = Detour(exchange, body, messages, tools)
    stream = exchange.call.stream  # the wire's reading (Gemini's is in the path, not the body)
    while upstream.status == 200 and rounds.more():
        if stream and wire.is_stream(upstream.content_type):
            relay, message = await read_stream(exchange, body, upstream, rounds)
        elif stream:
            return upstream
        else:
            relay, message = await read_whole(exchange, upstream, tools)
        if relay is not None or message is None:
            return relay or upstream
        payload = await rounds.follow_up(message)
        previous = exchange.call
        _carried(exchange.follow(), previous, recall_rounds=rounds.rounds)
        answer = await exchange.send(payload)
        if answer is None:
            return None
        upstream = answer
    return upstream


def _carried(call: CallRecord, previous: CallRecord, **facts: object) -> None:
    """The follow-up carries the request's projection record, with how it came (`recall_rounds`:
    the estimate learns nothing from a request the projection did not build)."""
    if previous.projection is not None:
        record.projected(call, {**previous.projection, **facts})


async def _without_tool(
    exchange: Exchange, body: Json, messages: list[Message], upstream: UpstreamResponse, tools: Toolbox
) -> UpstreamResponse | None:
    """The upstream answered 400 to the request carrying the tool: record that, send the request
    once more without the tool, and remember the route and model when that one is accepted (a
    400 again means the tool was not the reason: it is relayed, nothing is remembered)."""
    services, wire, route, settings = exchange.services, exchange.wire, exchange.route, exchange.policy.recall
    data = await read_recorded(exchange, upstream)
    rejection = classify(upstream.status, data)
    rejected = exchange.call
    kind = record.consumed(rejected, wire, upstream, data, exchange.t0, "recall")
    record.explained(rejected, REJECTED.format(detail=data[:2000].decode("utf-8", errors="replace")))
    payload, _ = wire.encode(tools.without_tools(body, wire), messages, exchange.call.stream, None)
    _carried(exchange.follow(), rejected, recall_rounds=0, recall_tool="rejected")
    await exchange.finish(rejected, kind)
    answer = await exchange.send(payload)
    if answer is not None and answer.status != 400:
        how = "a tool or schema rejection" if rejection.kind == "tool" else "accepted without the tool"
        reason = f"{how}: {rejection.message}"
        services.recalls_rejected.remember(route.name, rejected.model or "", reason, settings.rejected_seconds)
        services.metrics.observe_recall(route.name, "tool_rejected")
    return answer

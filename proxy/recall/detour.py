"""The detour: answer the model's recall calls and call upstream again until it answers otherwise.

At most `max_rounds` consumed answers; the last follow-up goes without the tool, so the model has to
answer. Each follow-up is the same request plus, per round, the assistant turn with its recall
calls and their results (`turns`); it is encoded by the client's wire, so tool pairing is the
wire's own (a chat `tool_calls` + `tool` messages, an Anthropic `tool_use` + `tool_result`, a
Responses `function_call` + `function_call_output` by `call_id`). The final answer's call record is
the `main` one, marked with `recall_rounds` in its projection record so the estimate is not
calibrated with a request the projection did not build.

The follow-ups stay inside the window: the room the projection left (`input_budget` -
`sent_tokens` of its record) pays for each round's assistant turn and results, so a result gets
at most its share of what is left (and says so when nothing is).

Before any of that: an upstream that answers the request carrying the tool with a 400 (not a
context overflow: `proxy.overflow` has handled those, and the tool was not their reason) gets it
once more without the tool (`without_tool`); when that is accepted, the route and model are
marked for `recall.rejected_seconds` (`memory.RejectedTool`) and the rejected call is a `recall`
record saying why.
"""

from __future__ import annotations

import json
import time

from .. import record
from ..config import Policy, Route
from ..errors import ProxyError
from ..protocols.base import Wire
from ..services import Services
from ..store.base import CallRecord
from ..types import Json, Message
from ..upstream.base import UpstreamResponse
from ..upstream.classify import classify
from .answer import answer, recall_calls
from .read import read_recorded, read_stream, read_whole
from .tool import without_tool
from .turns import intermediate_turn, tool_result

FRAMING_TOKENS = 16
"""What a tool result block / message adds around its text, generously."""
REJECTED = "upstream rejected the request carrying the recall tool (HTTP 400): {detail}; retried without the tool"


class Detour:
    """One request's recall rounds: the follow-up messages so far and how many rounds ran."""

    def __init__(
        self,
        services: Services,
        wire: Wire,
        route: Route,
        policy: Policy,
        body: Json,
        messages: list[Message],
        headers: dict[str, str],
        call: CallRecord,
    ) -> None:
        self.services, self.wire, self.route, self.body = services, wire, route, body
        self.settings = policy.recall
        self.messages, self.headers = messages, headers
        self.branch, self.model = call.branch_id or "", call.model or ""
        self.rounds = 0
        projection = call.projection or {}
        budget, sent = projection.get("input_budget"), projection.get("sent_tokens")
        self.room = budget - sent if isinstance(budget, int) and isinstance(sent, int) else None
        """Input tokens the follow-ups may still add within the window (None: unknown, not rewritten)."""

    def more(self) -> bool:
        return self.rounds < self.settings.max_rounds

    async def follow_up(self, message: Message) -> bytes | None:
        """The next request: this one plus `message`'s recall calls and their results."""
        self.rounds += 1
        self.services.metrics.observe_recall(self.route.name, "round")
        events = await self.services.store.lineage_events(self.branch, 0, 1 << 30)
        count = self.services.projector.counter(self.model).count_text
        calls = recall_calls(message, self.settings)
        turn = intermediate_turn(self.wire.name, message, self.settings)
        limit = None
        if self.room is not None:
            self.room -= count(json.dumps(turn, ensure_ascii=False)) + FRAMING_TOKENS * len(calls)
            limit = self.room // max(1, len(calls))
        results = [tool_result(c, answer(events, c, self.settings, count, limit)) for c in calls]
        if self.room is not None:
            self.room -= sum(count(str(r["content"])) for r in results)
        self.messages = [*self.messages, turn, *results]
        body = self.body if self.more() else without_tool(self.body, self.settings)
        payload, _ = self.wire.encode(body, self.messages, bool(self.body.get("stream")), None)
        return payload

    async def next_answer(self, message: Message) -> UpstreamResponse:
        """For a stream already relaying: the follow-up's answer (its record is the relay's)."""
        payload = await self.follow_up(message)
        return await self.services.upstream.send(self.route, "POST", self.wire.upstream_path, payload, self.headers)


async def detour(
    services: Services,
    wire: Wire,
    route: Route,
    policy: Policy,
    body: Json,
    messages: list[Message],
    call: CallRecord,
    upstream: UpstreamResponse,
    headers: dict[str, str],
    t0: float,
) -> tuple[UpstreamResponse, CallRecord, float]:
    """Answer the model's recall calls until it answers otherwise (bounded); returns the upstream
    answer to relay, its call record and when it was sent. Raises ProxyError as `send` does."""
    if upstream.status == 400:
        data = upstream.in_memory()
        if data is not None and classify(400, data).kind == "overflow":
            return upstream, call, t0  # retried as far as it goes (`proxy.overflow`): relayed
        return await _without_tool(services, wire, route, policy, body, messages, call, upstream, headers, t0)
    rounds = Detour(services, wire, route, policy, body, messages, headers, call)
    stream = bool(body.get("stream"))
    while upstream.status == 200 and rounds.more():
        if stream and wire.is_stream(upstream.content_type):
            relay, message = await read_stream(services, wire, body, route, call, upstream, t0, rounds)
        elif stream:
            return upstream, call, t0
        else:
            relay, message = await read_whole(services, wire, call, upstream, t0, policy.recall)
        if relay is not None or message is None:
            return relay or upstream, call, t0
        payload = await rounds.follow_up(message)
        call = _follow_up(services, route, call, rounds.rounds)
        t0 = time.monotonic()
        upstream = await _send(services, wire, route, call, payload, headers, t0)
    return upstream, call, t0


async def _without_tool(
    services: Services,
    wire: Wire,
    route: Route,
    policy: Policy,
    body: Json,
    messages: list[Message],
    call: CallRecord,
    upstream: UpstreamResponse,
    headers: dict[str, str],
    t0: float,
) -> tuple[UpstreamResponse, CallRecord, float]:
    """The upstream answered 400 to the request carrying the tool: record that, send the request
    once more without the tool, and remember the route and model when that one is accepted (a
    400 again means the tool was not the reason: it is relayed, nothing is remembered)."""
    data = await read_recorded(services, wire, call, upstream, t0)
    rejection = classify(upstream.status, data)
    call.purpose = "recall"
    call.upstream_status, call.request_id = upstream.status, upstream.request_id
    call.ttfb_ms = call.latency_ms = record.ms(time.monotonic() - t0)
    kind = record.answered(call, wire, upstream.status, data)
    call.error = REJECTED.format(detail=data[:2000].decode("utf-8", errors="replace"))
    await services.recorder.finish(call, wire.name, kind)
    stream = bool(body.get("stream"))
    payload, _ = wire.encode(without_tool(body, policy.recall), messages, stream, None)
    retry = _follow_up(services, route, call, 0)
    if retry.projection is not None:
        retry.projection = {**retry.projection, "recall_tool": "rejected"}
    t1 = time.monotonic()
    answer = await _send(services, wire, route, retry, payload, headers, t1)
    if answer.status != 400:
        how = "a tool or schema rejection" if rejection.kind == "tool" else "accepted without the tool"
        reason = f"{how}: {rejection.message}"
        services.recalls_rejected.remember(route.name, call.model or "", reason, policy.recall.rejected_seconds)
        services.metrics.observe_recall(route.name, "tool_rejected")
    return answer, retry, t1


async def _send(
    services: Services,
    wire: Wire,
    route: Route,
    call: CallRecord,
    payload: bytes | None,
    headers: dict[str, str],
    t0: float,
) -> UpstreamResponse:
    try:
        return await services.upstream.send(route, "POST", wire.upstream_path, payload, headers)
    except ProxyError as exc:
        record.failed(call, exc, t0)
        await services.recorder.finish(call, wire.name, record.error_kind(exc))
        raise


def _follow_up(services: Services, route: Route, previous: CallRecord, rounds: int) -> CallRecord:
    call = services.recorder.open(previous.tenant, route, previous.model, "main", previous.stream)
    call.conversation_id, call.branch_id = previous.conversation_id, previous.branch_id
    call.system_hash, call.tools_hash = previous.system_hash, previous.tools_hash
    if previous.projection is not None:
        # Marked, so the estimate is not calibrated with a request the projection did not build.
        call.projection = {**previous.projection, "recall_rounds": rounds}
    return call

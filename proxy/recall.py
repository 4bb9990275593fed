"""Recall (DESIGN step 6, invariant 12): a tool the proxy offers the model over the branch's stored history.

Problem: trimming and summaries keep every call inside the window, but a fact stated long ago (a
path in a tool result, an id, a number the user gave) may no longer be in what the model sees. The
store still has it whole; the model only needs a way to ask.

How: when the route's `recall` policy offers it, one function tool is appended to the upstream
request's tools; its definition depends only on the policy, so it is byte-identical on every
request of a conversation and prompt caches keep hitting. When the model's answer calls it, the
answer does not reach the client: the proxy searches the branch's lineage (`policies.search`),
appends the call and its result to the upstream request and calls upstream again, at most
`max_rounds` times (the last without the tool). Only the final answer is relayed. Each consumed
answer is a call record with `purpose: recall`; none of the detour becomes an event.

Example: the model answers `ctxproxy_recall({"query": "listen_port"})`; the proxy sends the same
request plus that call and a `<conversation_history_search>` result naming event 3; the model's
next answer ("the port is 8443") is what the client gets.

A stream is buffered only until it is clear whether it calls recall: its first text or its first
call of another tool starts the relay (buffered pieces first); a recall call is read to its end.
(A recall call after text or after another tool's call is relayed as it is.)

Scope for now: the OpenAI chat wire, streamed and not.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from policies.search import SearchableEvent, fit_newest, parse_query, render, render_event, search
from policies.text import call_arguments, call_name, tool_calls

from . import record
from .config import Policy, Recall, Route
from .errors import ProxyError
from .protocols.base import Wire
from .relay import StreamOutcome
from .services import Services
from .sse import SseSplitter
from .store.base import CallRecord
from .types import Json, Message
from .upstream.base import UpstreamResponse

WIRES = frozenset({"openai_chat"})
CHARS_PER_TOKEN = 4
"""Event texts are cut by characters; results are fitted by the route's tokenizer."""


def offered(policy: Policy, wire: Wire, body: Json, stream: bool) -> bool:
    """Whether this request gets the recall tool."""
    settings = policy.recall
    if settings.enabled is False or wire.name not in WIRES:
        return False
    if body.get("tool_choice") == "none":
        return False
    tools = body.get("tools")
    if settings.enabled == "auto" and not (isinstance(tools, list) and tools):
        return False
    return not any(_tool_name(tool) == settings.tool_name for tool in tools or [])


def tool_definition(settings: Recall) -> dict[str, Any]:
    """The tool in the OpenAI chat form: a function of the policy alone (invariant 12)."""
    return {
        "type": "function",
        "function": {
            "name": settings.tool_name,
            "description": (
                "Search this conversation's earlier history, including tool results that were trimmed "
                'and turns that were summarized. `query`: words and "quoted phrases", all must match, '
                "case-insensitive. Results are excerpts with event numbers, oldest first. Give `event` "
                "to read one stored event whole (bounded)."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": 'Words or "quoted phrases" to find.'},
                    "event": {"type": "integer", "description": "An event number to read whole."},
                },
                "required": ["query"],
            },
        },
    }


def with_tool(body: Json, settings: Recall) -> Json:
    """`body` with the recall tool appended to its tools (a copy; the client's body is untouched)."""
    return {**body, "tools": [*(body.get("tools") or []), tool_definition(settings)]}


def without_tool(body: Json, settings: Recall) -> Json:
    tools = [tool for tool in body.get("tools") or [] if _tool_name(tool) != settings.tool_name]
    out = {key: value for key, value in body.items() if key not in ("tools", "tool_choice", "parallel_tool_calls")}
    if tools:
        out["tools"] = tools
        for key in ("tool_choice", "parallel_tool_calls"):
            if key in body:
                out[key] = body[key]
    return out


def recall_calls(message: Message | None, settings: Recall) -> list[Mapping[str, Any]]:
    """The answer's calls of the recall tool (client tool calls beside them are dropped)."""
    if message is None:
        return []
    return [call for call in tool_calls(message) if call_name(call) == settings.tool_name]


def answer(
    events: Sequence[SearchableEvent], call: Mapping[str, Any], settings: Recall, count: Callable[[str], int]
) -> str:
    """The tool result for one recall call: search results or one event, bounded."""
    try:
        arguments = json.loads(call_arguments(call) or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return "Error: the arguments must be a JSON object with a string `query`."
    event = arguments.get("event")
    if isinstance(event, int) and not isinstance(event, bool):
        return render_event(events, event, settings.max_result_tokens * CHARS_PER_TOKEN)
    text = arguments.get("query")
    try:
        query = parse_query(text if isinstance(text, str) else "")
    except ValueError as exc:
        return f"Error: {exc}"
    fitted = fit_newest(search(events, query), settings.max_result_tokens, count)
    return render(text if isinstance(text, str) else "", fitted)


class Buffered(UpstreamResponse):
    """An upstream answer already read whole (to see whether it called recall)."""

    def __init__(self, upstream: UpstreamResponse, data: bytes) -> None:
        super().__init__(
            upstream.status, upstream.headers, upstream.content_type, upstream.request_id, upstream.started
        )
        self.data = data

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        return self.data

    def close(self) -> None:
        return None


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
    settings = policy.recall
    counter = services.projector.counter(call.model or "")
    stream = bool(body.get("stream"))
    rounds = 0
    while upstream.status == 200 and rounds < settings.max_rounds:
        if stream and wire.is_stream(upstream.content_type):
            relay, message = await _read_stream(services, wire, body, call, upstream, t0, settings)
        elif stream:
            return upstream, call, t0
        else:
            relay, message = await _read_whole(services, wire, call, upstream, t0, settings)
        if relay is not None:
            return relay, call, t0
        rounds += 1
        calls = recall_calls(message, settings)
        events = await services.store.lineage_events(call.branch_id or "", 0, 1 << 30)
        assistant = {"role": "assistant", "content": (message or {}).get("content"), "tool_calls": calls}
        results = [
            {
                "role": "tool",
                "tool_call_id": str(c.get("id", "")),
                "content": answer(events, c, settings, counter.count_text),
            }
            for c in calls
        ]
        messages = [*messages, assistant, *results]
        last = rounds >= settings.max_rounds
        payload, _ = wire.encode(without_tool(body, settings) if last else body, messages, stream, None)
        call = _follow_up(services, route, call, rounds)
        t0 = time.monotonic()
        try:
            upstream = await services.upstream.send(route, "POST", wire.upstream_path, payload, headers)
        except ProxyError as exc:
            record.failed(call, exc, t0)
            await services.recorder.finish(call, wire.name, record.error_kind(exc))
            raise
    return upstream, call, t0


async def _read_whole(
    services: Services, wire: Wire, call: CallRecord, upstream: UpstreamResponse, t0: float, settings: Recall
) -> tuple[UpstreamResponse | None, Message | None]:
    """A whole answer: (the answer to relay, None), or (None, its message) when it called recall
    (then it is recorded as a recall call)."""
    try:
        data = await upstream.read()
    except ProxyError as exc:
        record.failed(call, exc, t0)
        await services.recorder.finish(call, wire.name, record.error_kind(exc, answering=True))
        raise
    finally:
        upstream.close()
    parsed = _json(data)
    message = wire.response(parsed)[0] if parsed is not None else None
    if not recall_calls(message, settings):
        return Buffered(upstream, data), None
    call.purpose = "recall"
    call.upstream_status, call.request_id = upstream.status, upstream.request_id
    call.ttfb_ms = call.latency_ms = record.ms(time.monotonic() - t0)
    await services.recorder.finish(call, wire.name, record.answered(call, wire, 200, data))
    return None, message


async def _read_stream(
    services: Services,
    wire: Wire,
    body: Json,
    call: CallRecord,
    upstream: UpstreamResponse,
    t0: float,
    settings: Recall,
) -> tuple[UpstreamResponse | None, Message | None]:
    """A stream, buffered until it is clear whether it calls recall: (a response that replays the
    buffered pieces and goes on, None), or (None, its message) once a recall call was read whole."""
    observer = wire.observer(body)
    splitter = SseSplitter()
    pieces = aiter(upstream.pieces())
    head: list[bytes] = []
    outcome = StreamOutcome()
    recalling = False
    try:
        async for piece in pieces:
            outcome.first_byte_at = outcome.first_byte_at or time.monotonic()
            head.append(piece)
            for event in splitter.feed(piece):
                observer(event)
            verdict = recalling or stream_verdict(observer.message(), settings)
            if verdict is False:
                return Replayed(upstream, head, pieces), None
            recalling = bool(verdict)
    except ProxyError as exc:
        upstream.close()
        record.failed(call, exc, t0)
        await services.recorder.finish(call, wire.name, record.error_kind(exc, answering=True))
        raise
    if not recalling:
        return Replayed(upstream, head, None), None
    upstream.close()
    outcome.ended_at, outcome.upstream_finished = time.monotonic(), True
    call.purpose = "recall"
    await services.recorder.finish(call, wire.name, record.streamed(call, wire, upstream, observer, outcome, t0))
    return None, observer.message()


def stream_verdict(message: Message | None, settings: Recall) -> bool | None:
    """Whether the answer so far calls recall (True), does something else first (False), or
    cannot tell yet (None)."""
    if message is None:
        return None
    for call in tool_calls(message):
        name = call_name(call)
        if name == settings.tool_name:
            return True
        if name != "unknown" and not settings.tool_name.startswith(name):  # "unknown": no name yet
            return False
    if message.get("content"):
        return False
    return None


class Replayed(UpstreamResponse):
    """A stream whose first pieces were read to decide; they are replayed, then the rest follows."""

    def __init__(self, upstream: UpstreamResponse, head: list[bytes], rest: AsyncIterator[bytes] | None) -> None:
        super().__init__(
            upstream.status, upstream.headers, upstream.content_type, upstream.request_id, upstream.started
        )
        self.inner, self.head, self.rest = upstream, head, rest

    async def read(self, limit: int = 64 * 1024 * 1024) -> bytes:
        raise NotImplementedError("a replayed stream is read by pieces")

    async def pieces(self) -> AsyncIterator[bytes]:
        for piece in self.head:
            yield piece
        if self.rest is not None:
            async for piece in self.rest:
                yield piece

    def close(self) -> None:
        self.inner.close()


def _follow_up(services: Services, route: Route, previous: CallRecord, rounds: int) -> CallRecord:
    call = services.recorder.open(previous.tenant, route, previous.model, "main", previous.stream)
    call.conversation_id, call.branch_id = previous.conversation_id, previous.branch_id
    call.system_hash, call.tools_hash = previous.system_hash, previous.tools_hash
    if previous.projection is not None:
        # Marked, so the estimate is not calibrated with a request the projection did not build.
        call.projection = {**previous.projection, "recall_rounds": rounds}
    return call


def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
    return None


def _json(data: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None

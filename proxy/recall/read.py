"""Reading an upstream answer just far enough to know whether it calls the recall tool.

A whole body is read whole. A stream is buffered until it is clear: its first text, before any
tool call, starts the relay (the buffered pieces first, then the rest as it arrives); once it
calls any tool it is read to its end, because a recall call may follow a client tool call, and
then the whole answer is consumed (the client calls are dropped and the model issues them again).
Tool-call arguments are not shown to people as they stream, so holding them costs no visible
latency. A recall call after text that already went to the client is answered too, and the
follow-up continues the client's stream (`watch`, `Wire.continuation`).

An answer that called recall is recorded here with `purpose: recall`; any other answer is handed
back to the orchestrator to relay as if it had never been looked at (`HeldResponse`, `Replayed`), a
stream that started with text still watched for a later recall call (`watch.Watched`).
"""

from __future__ import annotations

import time
from typing import Any

from policies.text import tool_calls

from .. import codec, record
from ..errors import ProxyError
from ..exchange import Exchange
from ..relay import StreamOutcome
from ..sse import SseEvent, SseSplitter
from ..types import Json, Message
from ..upstream.base import HeldResponse, Replayed, UpstreamResponse
from .toolbox import Toolbox
from .watch import Answer, Rounds, Watched, may_call, may_write


def relay_now(message: Message | None) -> bool:
    """Whether the stream so far shows text before any tool call: nothing can be held back then."""
    return message is not None and not tool_calls(message) and bool(message.get("content"))


async def read_recorded(exchange: Exchange, upstream: UpstreamResponse) -> bytes:
    """The whole answer, the connection released; a failure to read it ends the request
    (`Exchange.fail`) and is raised."""
    try:
        return await upstream.read()
    except ProxyError as exc:
        await exchange.fail(exc, answering=True)
        raise
    finally:
        upstream.close()


async def read_whole(
    exchange: Exchange, upstream: UpstreamResponse, tools: Toolbox
) -> tuple[UpstreamResponse | None, Message | None]:
    """A whole answer: (the answer to relay, None), or (None, its message) when it called recall
    (then it is recorded as a recall call)."""
    wire = exchange.wire
    data = await read_recorded(exchange, upstream)
    parsed = _json(data)
    message = wire.response(parsed)[0] if parsed is not None else None
    if not tools.calls(message):
        return HeldResponse(upstream, data), None
    call = exchange.call
    await exchange.finish(call, record.consumed(call, wire, upstream, data, exchange.t0, "recall"))
    return None, message


async def read_stream(
    exchange: Exchange, body: Json, upstream: UpstreamResponse, rounds: Rounds
) -> tuple[UpstreamResponse | None, Message | None]:
    """A stream, buffered until it is clear whether it calls recall: (a response that relays the
    buffered events and goes on, still watched for a recall call after its text, None), or
    (None, its message) once it was read whole and called recall (then it is recorded as a
    recall call)."""
    wire, call, t0 = exchange.wire, exchange.call, exchange.t0
    answer = Answer(upstream, aiter(upstream.pieces()), wire.observer(body), SseSplitter(), t0)
    head: list[SseEvent] = []
    outcome = StreamOutcome()
    calling = False
    try:
        async for piece in answer.pieces:
            outcome.first_byte_at = answer.first_byte_at = answer.first_byte_at or time.monotonic()
            events = answer.splitter.feed(piece)
            for i, event in enumerate(events):
                answer.observer(event)
                head.append(event)
                if calling or not (may_call(wire, event) or may_write(wire, event)):
                    continue
                message = answer.observer.message()
                calling = bool(message and tool_calls(message))
                if relay_now(message):
                    return Watched(exchange, body, rounds, answer, head, events[i + 1 :]), None
    except ProxyError as exc:
        upstream.close()
        await exchange.fail(exc, answering=True)
        raise
    message = answer.observer.message()
    if not (answer.observer.done and rounds.tools.calls(message)):
        # one piece: the relay writes the events it holds at once, not one write each
        held = b"".join([*(e.raw for e in head), answer.splitter.rest()])
        return Replayed(upstream, [held] if held else []), None
    upstream.close()
    outcome.ended_at, outcome.upstream_finished = time.monotonic(), True
    kind = record.streamed(call, wire, upstream, answer.observer, outcome, t0, purpose="recall")
    await exchange.finish(call, kind)
    return None, message


def _json(data: bytes) -> dict[str, Any] | None:
    try:
        parsed = codec.loads(data)
    except ValueError:  # JsonRejected too: the answer is relayed as it is, recorded as unparsed
        return None
    return parsed if isinstance(parsed, dict) else None

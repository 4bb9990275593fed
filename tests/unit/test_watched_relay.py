"""A stream relayed through the recall watch (`Watched.reads` -> `StreamRelay`): the relay takes
the events the watch split and parsed, and the client still gets the upstream's bytes exactly,
wherever the upstream's reads cut them, with the relay's observer reading every event once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from bench.hop_events import Upstream
from proxy.protocols import OPENAI_CHAT
from proxy.recall.watch import Answer, Watched
from proxy.relay import StreamOutcome, StreamRelay
from proxy.sse import SseSplitter

BODY = {"stream": True, "stream_options": {"include_usage": True}}  # the client's own: nothing hidden


def _event(delta: str, end: bytes) -> bytes:
    data = '{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":' + delta
    return b"data: " + (data + ',"finish_reason":null}]}').encode() + end


def _relay(head_bytes: bytes, rest: list[bytes]) -> tuple[bytes, Any]:
    upstream = Upstream(rest)
    answer = Answer(upstream, aiter(upstream.pieces()), OPENAI_CHAT.observer(BODY), SseSplitter(), 0.0)
    head = answer.splitter.feed(head_bytes)
    for event in head:
        answer.observer(event)
    exchange: Any = SimpleNamespace(wire=OPENAI_CHAT, call=None)
    watched = Watched(exchange, BODY, SimpleNamespace(tools=None), answer, head, [])  # type: ignore[arg-type]
    observer = OPENAI_CHAT.observer(BODY)
    sent: list[bytes] = []
    outcomes: list[StreamOutcome] = []

    async def finish(outcome: StreamOutcome) -> None:
        outcomes.append(outcome)

    async def receive() -> Any:
        await asyncio.Event().wait()

    async def send(message: Any) -> None:
        sent.append(message.get("body", b""))

    asyncio.run(StreamRelay(watched, observer, finish, [])({"type": "http"}, receive, send))
    assert outcomes and outcomes[0].upstream_finished
    return b"".join(sent), observer


@pytest.mark.parametrize("cut", [1, 7, 37, 10_000])
@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n"])
def test_the_client_gets_the_upstreams_bytes_wherever_the_reads_cut_them(cut: int, end: bytes) -> None:
    words = [f"w{i} " for i in range(12)]
    head = _event('{"role":"assistant","content":""}', end) + _event('{"content":"first "}', end)
    rest = b"".join(_event(f'{{"content":"{w}"}}', end) for w in words) + b"data: [DONE]" + end
    relayed, observer = _relay(head, [rest[i : i + cut] for i in range(0, len(rest), cut)])
    assert relayed == head + rest
    assert observer.message() == {"role": "assistant", "content": "first " + "".join(words)}
    assert observer.chunks == 2 + len(words) and observer.done


def test_an_unterminated_last_event_is_relayed_as_it_came() -> None:
    head = _event('{"content":"a"}', b"\n\n")
    rest = _event('{"content":"b"}', b"\n\n") + b'data: {"cut'
    relayed, observer = _relay(head, [rest])
    assert relayed.startswith(head + _event('{"content":"b"}', b"\n\n"))
    assert observer.message() == {"role": "assistant", "content": "ab"}

"""The edge's cap counts a model call until its answer's last byte, not through the bookkeeping
after it; draining still waits for the bookkeeping. Driven through `Edge` with an ASGI app that
answers, then keeps working (as the proxy's app stores the response turn and call record)."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.config import Server
from proxy.serving.gate import Edge, Gate

PATH = "/v1/chat/completions"


class _App:
    """Answers 200 at once, then holds its bookkeeping until `done` is set; `answering`, when
    given, holds the answer's last byte instead."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.answering: asyncio.Event | None = None
        self.sent = asyncio.Event()
        """set once the answer's last byte went out"""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if self.answering is not None:
            await send({"type": "http.response.body", "body": b"{", "more_body": True})
            await self.answering.wait()
        await send({"type": "http.response.body", "body": b"{}"})
        self.sent.set()
        await self.done.wait()


async def _call(edge: Edge) -> int:
    """One model call through the edge; its status."""
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    scope = {
        "type": "http",
        "method": "POST",
        "path": PATH,
        "raw_path": PATH.encode(),
        "headers": [],
        "query_string": b"",
    }
    await edge(scope, receive, send)
    return statuses[0]


async def test_a_call_in_its_bookkeeping_leaves_its_place_to_the_next() -> None:
    gate, app = Gate(), _App()
    edge = Edge(app, Server(max_concurrent_requests=1), gate)
    first = asyncio.create_task(_call(edge))
    await app.sent.wait()  # answered, now in its bookkeeping
    second = _App()
    second.done.set()  # the next call's bookkeeping ends at once
    assert await _call(Edge(second, Server(max_concurrent_requests=1), gate)) == 200
    assert gate.in_flight == 1 and not await gate.idle(0.05)  # the first's bookkeeping still runs
    app.done.set()
    assert await first == 200 and await gate.idle(1.0)


async def test_a_call_not_answered_to_its_last_byte_holds_its_place_and_draining_waits() -> None:
    gate, app = Gate(), _App()
    app.answering = asyncio.Event()
    edge = Edge(app, Server(max_concurrent_requests=1), gate)
    first = asyncio.create_task(_call(edge))
    await asyncio.sleep(0.05)
    assert await _call(edge) == 503  # the stream is still going: the cap holds
    app.answering.set()
    await app.sent.wait()
    assert gate.in_flight == 1 and not await gate.idle(0.05)  # its bookkeeping: draining waits
    app.done.set()
    assert await first == 200 and await gate.idle(1.0) and gate.in_flight == 0

"""Relay an upstream SSE stream to the client as it arrives, and always learn how it ended.

A plain ASGI response rather than starlette's StreamingResponse, because the proxy must record
every call, and a generator's `finally` is not a reliable place for that: under ASGI 2.4 a
disconnect surfaces only at the next write, and a cancelled generator cannot await its cleanup.
Here a watcher task turns `http.disconnect` into cancellation of the copy loop, and the outcome
is handed to `finish` inside a shielded scope, whatever happened: complete, upstream error or
time-out mid-stream (the client gets one error event, the record says `partial`), or the client
going away.

Each complete SSE event is forwarded as soon as it is complete (the events that arrived in one
upstream read, in one write); the wire's observer reads it on the side and may rewrite or drop it
(the usage chunk a client did not ask for).

A whole (non-streamed) answer is awaited with `or_disconnect` (`read_or_disconnect`): the client
may hang up while the upstream is still working on it (most upstreams send nothing until the
answer is ready), and then the upstream request is cancelled and the call recorded `partial`,
not `complete`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
from starlette.types import Receive, Scope, Send

from .asgi import SHUTDOWN_KEY, RawResponse
from .credentials import Keys
from .errors import Overloaded, ProxyError, UpstreamError
from .protocols.base import StreamObserver
from .sse import SseSplitter
from .upstream.base import UpstreamResponse

T = TypeVar("T")


async def or_disconnect(receive: Receive, work: Awaitable[T]) -> T | None:
    """`work`'s result, or None when the client hangs up first (`work` is then cancelled, which
    closes its upstream request). Only after the request body was read: until then `receive`
    carries the body. `work` runs in the calling task, as it would without the watch."""
    current = asyncio.current_task()
    assert current is not None
    gone = False

    async def client_gone() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        current.cancel()

    watcher = asyncio.ensure_future(client_gone())
    try:
        return await work
    except asyncio.CancelledError:
        if gone and current.uncancel() == 0:
            return None
        raise
    finally:
        watcher.cancel()


async def read_or_disconnect(receive: Receive, upstream: UpstreamResponse) -> bytes | None:
    """`upstream`'s whole body as `or_disconnect` awaits it; one already in memory (an answer
    read to see whether it called recall) is returned without a watch, which could not see
    anything in the meantime (a task started and cancelled per request for nothing)."""
    held = upstream.in_memory()
    return held if held is not None else await or_disconnect(receive, upstream.read())


async def nothing(scope: Scope, receive: Receive, send: Send) -> None:
    """The response to a client that is gone."""


@dataclass
class StreamOutcome:
    first_byte_at: float | None = None
    ended_at: float | None = None
    upstream_finished: bool = False
    """The upstream closed the stream normally."""
    client_disconnected: bool = False
    error: ProxyError | None = None
    truncated: bytes = b""
    """An unterminated final event the upstream left behind."""


class StreamRelay:
    def __init__(
        self,
        upstream: UpstreamResponse,
        observer: StreamObserver,
        finish: Callable[[StreamOutcome], Awaitable[None]],
        extra_headers: list[tuple[str, str]],
    ) -> None:
        self.upstream = upstream
        self.observer = observer
        self.finish = finish
        self.headers = [*upstream.headers, *extra_headers]
        self._started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = StreamOutcome()
        current = asyncio.current_task()
        assert current is not None
        cut = False
        """A watcher cancelled the copy (the client left, the proxy is shutting down)."""

        async def watch_disconnect() -> None:
            nonlocal cut
            while (await receive())["type"] != "http.disconnect":
                pass
            outcome.client_disconnected = cut = True
            current.cancel()

        async def watch_shutdown(shutdown: asyncio.Event) -> None:
            nonlocal cut
            await shutdown.wait()
            outcome.error = Overloaded("The proxy is shutting down; the stream was cut.", code="shutting_down")
            cut = True
            current.cancel()

        # Plain tasks cancelling this one, as `or_disconnect` does, not an anyio task group: a group
        # costs several times as much per stream, and a child of a group that ends cancelled (this
        # one nearly always would) leaves its CancelledError in a reference cycle with anyio's
        # `task_done` frame. The copy runs in this task; a watcher runs only while it waits in
        # the copy, so that is where its cancellation lands.
        shutdown = scope.get(SHUTDOWN_KEY)
        watchers = [asyncio.ensure_future(watch_disconnect())]
        if shutdown is not None:
            watchers.append(asyncio.ensure_future(watch_shutdown(shutdown)))
        try:
            try:
                await self._copy(send, outcome)
            except OSError:
                outcome.client_disconnected = True
            except asyncio.CancelledError:
                if not cut or current.uncancel() > 0:
                    raise
            finally:
                for watcher in watchers:
                    watcher.cancel()
            if outcome.error is not None and outcome.error.code == "shutting_down" and self._started:
                await send({"type": "http.response.body", "body": self.observer.error_event(outcome.error)})
        finally:
            outcome.ended_at = time.monotonic()
            self.upstream.close()
            with anyio.CancelScope(shield=True):
                await self.finish(outcome)

    async def _copy(self, send: Send, outcome: StreamOutcome) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": self.upstream.status,
                "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers],
            }
        )
        self._started = True
        splitter = SseSplitter()
        first = True
        try:
            async for events in self.upstream.reads(splitter):
                if outcome.first_byte_at is None:
                    outcome.first_byte_at = time.monotonic()
                outs: list[bytes] = []
                for event in events:
                    out = self.observer(event)
                    if not out:
                        continue
                    if first:  # at once, not after the rest of its read: the time to first token
                        first = False
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                    else:
                        outs.append(out)
                if outs:  # the rest of one read in one write: they are all here, none waits for another
                    body = outs[0] if len(outs) == 1 else b"".join(outs)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            outcome.upstream_finished = True
            outcome.truncated = splitter.rest()
            if not self.observer.done and self.observer.failure() is None:
                # A clean close before the API's end event is still a cut: tell the client so.
                cut = UpstreamError(
                    f"The upstream closed the stream before its end event ({self.observer.chunks} chunks)."
                )
                await send({"type": "http.response.body", "body": self.observer.error_event(cut), "more_body": True})
        except ProxyError as exc:
            # Kept for its message and code only; its traceback holds this frame, which holds
            # `outcome`: a reference cycle.
            outcome.error = exc.with_traceback(None)
            # In the client API's own stream vocabulary (Anthropic `event: error`, Responses, chat).
            await send({"type": "http.response.body", "body": self.observer.error_event(exc), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def relay_unchanged(
    keys: Keys, upstream: UpstreamResponse, extra_headers: list[tuple[str, str]] | None = None
) -> RawResponse:
    """The upstream's whole answer as it came: status, headers, body -- an error's with the
    operator's secrets redacted (`Keys.redact`)."""
    try:
        body = await upstream.read()
    finally:
        upstream.close()
    if upstream.status >= 400:
        body = keys.redact(body)
    return RawResponse(body, upstream.status, [*keys.redact_headers(upstream.headers), *(extra_headers or [])])

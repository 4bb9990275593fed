"""Scaffolding shared by the scripted upstream servers of the tests.

:class:`ScriptedServer` runs an ASGI app (the subclass's ``_app``) under uvicorn in a background
thread with its own event loop: ``start()`` binds a free port on 127.0.0.1 before returning,
``stop()`` shuts it down (hanging handlers are released), and the server is a context manager.
It also holds a FIFO of scripted replies (``push``/``clear``/``pending``, plus an optional
``responder`` that answers when the queue is empty), records every request
(:class:`RecordedRequest`) and, for the protocol servers, the numbers of every window check
(``measured``, the refused ones also in ``overflows``: :class:`tests.support.overflow.Measured`);
a long run (the continuity bench) takes what it has read out with :meth:`ScriptedServer.take`
and may stop keeping replies (``record_replies``). It offers the helpers the protocol servers share: reading the
request body, writing a complete response, watching for an early client disconnect, and
writing a stream of events with the drop / hold / delay knobs the tests script.

The protocol servers (:mod:`tests.support.upstream_server`, :mod:`tests.support.anthropic_upstream`,
:mod:`tests.support.responses_upstream`) subclass it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Generic, TypeVar

import uvicorn

from tests.support.overflow import Measured
from tests.support.waiting import wait_until

__all__ = ["RecordedRequest", "ScriptedServer", "split_text"]

R = TypeVar("R")
S = TypeVar("S", bound="ScriptedServer[Any]")


@dataclasses.dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    raw: bytes
    body: Any  # parsed JSON, or None when the body was not JSON


class _Dropped(Exception):
    """Raised inside the ASGI app to make uvicorn abort the connection mid-response."""


def split_text(text: str, n: int) -> list[str]:
    """Split text into at most n non-empty pieces (n >= 1)."""
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size, rest = divmod(len(text), n)
    pieces, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < rest else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


class ScriptedServer(Generic[R]):
    """uvicorn-in-a-thread lifecycle, a scripted reply queue and request recording.

    Subclasses set ``reply_class`` (the default reply when neither the queue nor the responder
    gives one), ``thread_name`` and ``start_error``, implement the ASGI ``_app`` and may override
    ``_warm_up`` (run in ``start()`` before the server listens) and ``_reset`` (extra state that
    ``clear()`` forgets; called with the lock held).
    """

    reply_class: Callable[[], R]
    thread_name = "scripted-upstream"
    start_error = "scripted upstream server did not start"

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.replies_sent: list[R] = []
        self.record_replies = True  # False: replies are not kept in `replies_sent` (a long run's memory)
        self.measured: list[Measured] = []  # every request at the window check, in order
        self.overflows: list[Measured] = []  # those refused as too long
        # Answers requests when the queue is empty: body -> reply (None: the default reply).
        self.responder: Callable[[dict[str, Any]], R | None] | None = None
        self._queue: deque[R] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._sock: socket.socket | None = None
        self.port: int = 0

    # ---- lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def _warm_up(self) -> None:
        """Work to do before the first request rather than inside a timed one."""

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise NotImplementedError

    def start(self: S) -> S:
        self._warm_up()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            log_level=os.environ.get("UPSTREAM_LOG_LEVEL", "critical"),
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            # The providers' front ends keep an idle connection for a minute or more; uvicorn's
            # 5 s would race the proxy's pool (kept 30 s) whenever a test pauses between calls.
            timeout_keep_alive=75,
            http="h11",
            interface="asgi3",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=self.thread_name, daemon=True
        )
        self._thread.start()
        server, thread = self._server, self._thread

        def started() -> bool:
            if not thread.is_alive():
                raise RuntimeError(self.start_error)
            return bool(server.started)

        try:
            wait_until(started, timeout=10, interval=0.01, what=f"{self.thread_name} to start")
        except AssertionError as exc:
            raise RuntimeError(f"{self.start_error}: {exc}") from None
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- scripting and inspection

    def push(self, *replies: R) -> None:
        with self._lock:
            self._queue.extend(replies)

    def _reset(self) -> None:
        """Forget subclass state in ``clear()`` (called with the lock held)."""

    def clear(self) -> None:
        """Forget queued replies and recorded requests (between tests on a shared server)."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.replies_sent.clear()
            self.measured.clear()
            self.overflows.clear()
            self._reset()
            self.responder = None

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[RecordedRequest]:
        def arrived() -> list[RecordedRequest] | None:
            with self._lock:
                return list(self.requests) if len(self.requests) >= n else None

        try:
            return wait_until(arrived, timeout=timeout, interval=0.01, what=f"{n} upstream requests")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; upstream got {len(self.requests)} requests, expected {n}") from None

    def _next_reply(self, body: dict[str, Any]) -> R:
        """The queued reply, else the responder's, else the default one; recorded as sent."""
        with self._lock:
            queued = self._queue.popleft() if self._queue else None
            responder = self.responder
        reply = queued or (responder(body) if responder is not None else None) or self.reply_class()
        if self.record_replies:
            with self._lock:
                self.replies_sent.append(reply)
        return reply

    def _measured(self, measured: Measured) -> None:
        """Record a window check (and the overflow, when it refused the request)."""
        with self._lock:
            self.measured.append(measured)
            if measured.error is not None:
                self.overflows.append(measured)

    def take(self, model: str) -> tuple[list[RecordedRequest], list[Measured]]:
        """Remove and return the recorded requests and window checks of `model` (a long run reads
        each session's records once it is over, then lets them go)."""

        def of(body: Any) -> bool:
            return isinstance(body, dict) and body.get("model") == model

        with self._lock:
            requests = [r for r in self.requests if of(r.body)]
            measured = [m for m in self.measured if m.model == model]
            self.requests[:] = [r for r in self.requests if not of(r.body)]
            self.measured[:] = [m for m in self.measured if m.model != model]
            self.overflows[:] = [m for m in self.overflows if m.model != model]
        return requests, measured

    # ---- request side

    async def _receive_request(
        self, scope: dict[str, Any], receive: Any, path: str | None = None
    ) -> RecordedRequest | None:
        """Read the whole body, parse it as JSON if it is JSON and record the request.

        None (nothing recorded) for a non-HTTP scope or when the client went away before the
        body was complete.
        """
        if scope["type"] != "http":
            return None
        raw = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = RecordedRequest(
            method=scope["method"],
            path=scope["path"] if path is None else path,
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=headers,
            raw=raw,
            body=body,
        )
        with self._lock:
            self.requests.append(record)
        return record

    # ---- response side

    @staticmethod
    async def _send_body(send: Any, status: int, headers: list[tuple[bytes, bytes]], data: bytes) -> None:
        """A complete response in one body message."""
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.05))

    async def _wait(self, reply: Any, predicate: Callable[[], bool], timeout: float | None = 60.0) -> None:
        """Until ``predicate()``, the client goes away, the server stops or ``timeout`` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not predicate() and not self._stopping.is_set():
            if reply.disconnected.is_set() or (deadline is not None and time.monotonic() > deadline):
                return
            await asyncio.sleep(0.01)

    @staticmethod
    async def _watch_disconnect(receive: Any, reply: Any, finished: threading.Event) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                # uvicorn also reports "disconnect" once the response is complete; only an early
                # one means the client went away.
                if not finished.is_set():
                    reply.disconnected.set()
                return

    @contextlib.asynccontextmanager
    async def _watching(self, receive: Any, reply: Any) -> AsyncIterator[threading.Event]:
        """Sets ``reply.disconnected`` if the client goes away before the yielded event is set."""
        finished = threading.Event()
        watcher = asyncio.ensure_future(self._watch_disconnect(receive, reply, finished))
        try:
            yield finished
        finally:
            finished.set()
            watcher.cancel()

    async def _write_stream(
        self,
        send: Any,
        reply: Any,
        headers: list[tuple[bytes, bytes]],
        events: Sequence[bytes],
        finished: threading.Event,
        on_sent: Callable[[int, bytes], None],
        *,
        drop_after: int | None = None,
        hold_after: int = 1,
        hold_timeout: float | None = None,
        delay_between: float = 0.0,
        error_after: int | None = None,
        error_event: bytes = b"",
    ) -> None:
        """Send a 200 stream of ``events`` with the scripted knobs of ``reply``.

        ``error_after``: send ``error_event`` instead of event k and end the stream;
        ``drop_after``: abort the connection before event k; ``reply.hold``: wait for it before
        event ``hold_after``. Stops quietly when the client went away or the server stops.
        ``on_sent(k, data)`` is called after each event is written (k is -1 for the error event).
        """
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for k, data in enumerate(events):
            if error_after is not None and k == error_after:
                await send({"type": "http.response.body", "body": error_event, "more_body": True})
                on_sent(-1, error_event)
                break
            if drop_after is not None and k >= drop_after:
                raise _Dropped()  # uvicorn aborts the connection: no terminating event
            if reply.disconnected.is_set() or self._stopping.is_set():
                return
            if k and delay_between:
                await self._sleep(delay_between)
            if reply.hold is not None and k == hold_after:
                await self._wait(reply, reply.hold.is_set, timeout=hold_timeout)
                if reply.disconnected.is_set() or self._stopping.is_set():
                    return
            await send({"type": "http.response.body", "body": data, "more_body": True})
            on_sent(k, data)
        finished.set()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

"""The ASGI edge in front of the app: the concurrency cap, draining, and readiness.

- **Cap.** At most `server.max_concurrent_requests` model calls (the APIs' paths) are answered at
  once; a call counts until its answer's last byte (a stream's too), not through the bookkeeping
  after it (the response turn and call record), so an agent's next request, sent the moment it
  has the answer, never finds its own finished call still holding a place. One more is answered
  at once with 503 `service_unavailable` / `overloaded` and `Retry-After`, in the shape of the API
  called, rather than queued behind the others until its client times out.
- **Draining** (`Gate.drain`, called by proxy/serving/server.py on SIGTERM): from that moment `/readyz`
  and `/healthz` answer 503 `{"status": "draining"}`, so a load balancer stops sending; a new
  model call or admin request is answered 503 `shutting_down` with `Retry-After` and
  `Connection: close`; the calls already running, bookkeeping included, go on until they end (the
  server waits up to `server.shutdown_grace`, `Gate.idle`); then `Gate.cut`: a stream still running ends with the
  API's error event, a call not answered yet is answered 503 `shutting_down`.
- **Readiness.** `/readyz` is `/healthz` (the store answers) unless draining, and says the load:
  `{"status": "ok", "in_flight": <model calls>, "tasks": <asyncio tasks>}`.

Health, readiness and metrics are never capped: probes must get through a saturated proxy.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ..asgi import SHUTDOWN_KEY, error_response, json_response
from ..config import Server
from ..errors import Overloaded
from ..protocols import wire_for_path

PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


class Gate:
    """In-flight model calls and the draining flag, shared by the edge and the server."""

    def __init__(self) -> None:
        self.in_flight = 0
        """model calls running, until their bookkeeping ends (what draining waits for)"""
        self.answering = 0
        """model calls not answered to their last byte yet (what the cap counts)"""
        self.draining = False
        self.cutting = False
        self.shutdown = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.in_flight += 1
        self.answering += 1
        self._idle.clear()

    def answered(self) -> None:
        self.answering -= 1

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    def drain(self) -> None:
        self.draining = True

    def cut(self) -> None:
        """The grace period is over: streams still running end now (`SHUTDOWN_KEY`)."""
        self.cutting = True
        self.shutdown.set()

    async def idle(self, timeout: float) -> bool:
        """Wait until no model call runs, at most `timeout` seconds; True if none does."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Edge:
    def __init__(self, app: ASGIApp, server: Server, gate: Gate) -> None:
        self.app = app
        self.server = server
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        gate = self.gate
        if path in PROBES:
            if gate.draining and path != "/metrics":
                await json_response({"status": "draining"}, 503, [("connection", "close")])(scope, receive, send)
                return
            if path == "/readyz":
                await self._ready(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        model_call = wire_for_path(path) is not None
        if gate.draining:
            message = "The proxy is shutting down; retry on another one."
            await self._refuse(scope, receive, send, "shutting_down", message)
            return
        cap = self.server.max_concurrent_requests
        if not model_call:
            await self.app(scope, receive, send)
            return
        if cap is not None and gate.answering >= cap:
            message = f"The proxy is serving {gate.answering} calls, its limit (server.max_concurrent_requests); retry."
            await self._refuse(scope, receive, send, "overloaded", message)
            return
        gate.enter()
        started = ended = False

        async def watched_send(message: Any) -> None:
            nonlocal started, ended
            started = started or message["type"] == "http.response.start"
            last = message["type"] == "http.response.body" and not message.get("more_body", False)
            try:
                await send(message)
            finally:
                if last and not ended:
                    ended = True
                    gate.answered()

        try:
            await self.app({**scope, SHUTDOWN_KEY: gate.shutdown}, receive, watched_send)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not gate.cutting or task is None:
                raise
            task.uncancel()  # the server cut this call at the end of the grace period: answer it
            if not started:
                await self._refuse(scope, receive, send, "shutting_down", "The proxy shut down before answering.")
        finally:
            if not ended:
                gate.answered()
            gate.leave()

    async def _ready(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`/healthz`'s verdict (the store answers), with the load: model calls and tasks."""
        status = 503

        async def verdict(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await self.app({**scope, "path": "/healthz", "raw_path": b"/healthz"}, receive, verdict)
        body = {"status": "ok" if status == 200 else "store unavailable", "in_flight": self.gate.in_flight}
        body["tasks"] = len(asyncio.all_tasks())
        await json_response(body, status)(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, code: str, message: str) -> None:
        response = error_response(Overloaded(message, code=code), wire_for_path(scope["path"]))
        extra: list[tuple[str, Any]] = [("retry-after", str(self.server.retry_after))]
        if code == "shutting_down":
            extra.append(("connection", "close"))
        response.headers.extend(extra)
        await response(scope, receive, send)

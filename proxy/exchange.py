"""One client request's exchange with the upstream: its per-call context, in one place.

A client request becomes one or more upstream calls: the main call, the attempts an overflow
refused (purpose `overflow`, `proxy.overflow`), the answers the recall tool consumed (`recall`,
`proxy.recall`). They share who asked, where it goes (route, wire, policy, the headers sent
upstream), which history it belongs to (the request's stored events, `Ingested`) and the call
record of the attempt under way (`Attempt`). `Exchange` holds them and is the one place that
sends an attempt (`send`), opens the next one (`follow`), and ends a call that got no answer
(`fail`: the record says why, it is no branch's last call, the request's events are retracted).

Example: a request refused once as too long is three records: the refused attempt (`overflow`),
then, projected smaller, the answered one (`main`, `attempt` 2), each sent by `send`, the first
ended by `refused`, the second by the relay.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from . import record
from .asgi import Incoming
from .config import Route
from .errors import ProxyError, StoreError
from .estimate import Prediction
from .ingest import Ingested
from .policy_settings import Policy
from .protocols.base import Wire
from .relay import or_disconnect
from .services import Services
from .settle import reject
from .shadow.runner import Sample
from .store.base import CallRecord
from .types import Message
from .upstream.base import UpstreamResponse

log = logging.getLogger("ctxproxy")


@dataclass
class Attempt:
    """One upstream call of the request: its record, the prediction it was budgeted on, the
    upstream tokens its input could use, its reply reserve, what it was budgeted lower by
    (`cut`, cumulative, after overflows) and its number."""

    call: CallRecord
    prediction: Prediction | None = None
    limit: int | None = None
    output: int | None = None
    cut: int = 0
    number: int = 1


class Exchange:
    def __init__(
        self,
        services: Services,
        wire: Wire,
        route: Route,
        policy: Policy,
        request: Incoming,
        ingested: Ingested,
        call: CallRecord,
    ) -> None:
        self.services, self.wire, self.route, self.policy = services, wire, route, policy
        self.request, self.ingested = request, ingested
        self.attempt = Attempt(call)
        self.headers: dict[str, str] = {}
        """what goes upstream with every call of the request (set once the caller is known)"""
        self.t0 = time.monotonic()
        """when the call under way was sent"""
        self.shadow: Sample | None = None
        """the request's shadow pair to start once it is answered (None: not sampled)"""
        self.sent: tuple[dict[str, Any], list[Message]] | None = None
        """the body and messages the attempt under way was encoded from (None: not rewritable)"""
        self.sent_bytes = 0
        """the bytes the attempt under way went upstream with"""

    @property
    def call(self) -> CallRecord:
        return self.attempt.call

    def redact(self, data: bytes) -> bytes:
        """`data` without any secret: the operator's keys and the caller's own."""
        return self.services.keys.redact(data, self.wire.client_key(self.request.headers, self.request.query))

    async def send(self, payload: bytes | None) -> UpstreamResponse | None:
        """Send the call under way; None when the client left before the answer began. A hop that
        fails ends the call (`fail`) and raises."""
        self.t0 = time.monotonic()
        call = self.call
        sending = self.services.upstream.send(
            self.route, "POST", self.upstream_path, payload, self.headers, self.wire, call.stream
        )
        try:
            return await or_disconnect(self.request.receive, sending)
        except ProxyError as exc:
            await self.fail(exc)
            raise

    async def open(self, payload: bytes | None) -> UpstreamResponse:
        """Send a follow-up whose answer the client is already waiting in (a relayed stream's
        recall round): it has no record of its own, the relay's is the request's."""
        stream = self.call.stream
        return await self.services.upstream.send(
            self.route, "POST", self.upstream_path, payload, self.headers, self.wire, stream
        )

    @property
    def upstream_path(self) -> str:
        """Where the request's calls go on the route's `base_url` (`Wire.upstream_path_for`)."""
        call = self.call
        return self.wire.upstream_path_for(call.model or "", call.stream)

    def follow(self, purpose: str = "main", **attempt: Any) -> CallRecord:
        """The record of the request's next call (a follow-up, a retry), now under way."""
        self.attempt = Attempt(self.services.recorder.follow(self.call, purpose), **attempt)
        self.t0 = time.monotonic()
        return self.call

    async def finish(self, call: CallRecord, error_kind: str | None = None) -> None:
        """Write a record of the request that is not its answer (refused, consumed, failed)."""
        await self.services.recorder.finish(call, self.wire, error_kind)

    async def fail(self, exc: ProxyError, answering: bool = False, call: CallRecord | None = None) -> None:
        """The request got no answer: the record says why and is written, it is no branch's last
        call, and the request's events are retracted (a rejected request leaves no trace)."""
        call = call or self.call
        if call.error is None:
            record.failed(call, exc, self.t0)
        await self.rejected(call, record.error_kind(exc, answering))

    async def rejected(self, call: CallRecord, error_kind: str | None) -> None:
        """The request got no answer: its events are retracted (its conversation deleted when it
        founded it: the record then belongs to no conversation, and the error the client gets
        names none), then the record is written."""
        record.detach(call)
        if await retract(self.services, self.ingested, self.request):
            call.conversation_id = None
        await self.finish(call, error_kind)


async def retract(services: Services, ingested: Ingested, request: Incoming) -> bool:
    """Remove a request's events from the history: it got no answer (or the proxy itself refused
    it), so it leaves no trace; a store that fails now keeps them (logged). True when the
    conversation went with them (`settle.reject`): the answer then names no conversation."""
    try:
        gone = await reject(services.store, ingested)
    except StoreError as exc:
        log.warning("events of a rejected request in conversation %s kept: %s", ingested.identity.conversation_id, exc)
        return False
    if gone:
        request.reported = []  # there is no conversation left to name
    return gone

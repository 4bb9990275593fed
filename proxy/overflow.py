"""Forward with recovery (DESIGN step 5): a context overflow is a measurement, not an error to relay.

An upstream that answers "context too long" before any byte reached the client has told us
something the estimate could not: its own count of the request and, usually, its window. The
answer is classified (`upstream.classify`); an overflow teaches the estimator
(`Estimator.overflowed`), and the request is projected again with its budget lowered by the
measured overshoot plus the margin and sent again, at most `RETRIES` times. The client sees one
ordinary answer. A request ctxproxy passed through unchanged because it thought it fit is no
exception: the retry is a projection. A stream that fails before its answer begins (the
Responses API reports an overflow as `response.failed` in a 200 stream) is read that far first
(`opening`, the wire's `opening_failure`) and handled alike; otherwise it is relayed from its
first byte, the opening replayed.

Each refused attempt is a call record of purpose `overflow` (status error, the provider's own
message, `attempt` in its projection record); the answered one is the `main` record with
`attempt` > 1; `ctxproxy_upstream_overflows_total{route,purpose,outcome}` counts them. Any other
answer, and an overflow on a route that does not rewrite, goes to the client as it came.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from . import record
from .errors import ProxyError
from .exchange import Attempt, Exchange
from .protocols.base import Wire
from .sse import SseSplitter
from .upstream.base import HeldResponse, Replayed, UpstreamResponse
from .upstream.classify import Rejection, classify, overshoot, window_of

RETRIES = 2
OVERFLOW_STATUSES = frozenset({400, 413})
OPENING_LIMIT = 64 * 1024
"""Bytes of a stream read, at most, to see whether it fails before its answer begins."""
UNKNOWN_OVERSHOOT = 0.05
"""Share of the input limit cut when the provider's error gives no numbers (OpenAI Responses:
"Your input exceeds the context window of this model"), per attempt."""
ERROR_BODY_LIMIT = 1024 * 1024


Resend = Callable[[], Awaitable[UpstreamResponse | None]]
"""Project the request again for the attempt under way (`Exchange.attempt`, budgeted lower by its
`cut`) and send it; None when the client left meanwhile."""


async def opening(upstream: UpstreamResponse, wire: Wire) -> tuple[UpstreamResponse, bytes | None]:
    """A stream's opening events read until its answer begins or it fails (at most
    `OPENING_LIMIT` bytes): the stream to relay, replaying them, and the failure's JSON if it
    failed before any of the answer."""
    rest = upstream.pieces()
    splitter = SseSplitter()
    pieces: list[bytes] = []
    size, failure, error = 0, None, None
    try:
        async for piece in rest:
            pieces.append(piece)
            size += len(piece)
            verdict = next((v for v in map(wire.opening_failure, splitter.feed(piece)) if v is not None), None)
            if verdict is not None or size > OPENING_LIMIT:
                failure = verdict if isinstance(verdict, bytes) else None
                break
    except ProxyError as exc:
        error = exc
    return Replayed(upstream, pieces, rest, error), failure


async def held(upstream: UpstreamResponse, redact: Callable[[bytes], bytes]) -> tuple[UpstreamResponse, Rejection]:
    """An error answer read whole (bounded), redacted, classified, and kept for relaying (an
    error body that broke off is relayed as what arrived: nothing)."""
    try:
        data = await upstream.read(ERROR_BODY_LIMIT)
    except ProxyError:
        data = b""
    finally:
        upstream.close()
    data = redact(data)
    return HeldResponse(upstream, data), classify(upstream.status, data)


def lowered(attempt: Attempt, rejection: Rejection) -> int:
    """The next attempt's cut: the overshoot the provider measured (or a share of the limit when
    it gave no numbers, growing per attempt) plus the margin the refused attempt kept."""
    prediction, limit = attempt.prediction, attempt.limit or 0
    over = overshoot(rejection, attempt.output)
    if over is None:
        over = int(UNKNOWN_OVERSHOOT * attempt.number * limit)
    margin = prediction.margin if prediction is not None else 0
    return attempt.cut + max(1, over) + margin


async def recover(
    exchange: Exchange, upstream: UpstreamResponse, resend: Resend, rewriting: bool
) -> UpstreamResponse | None:
    """`upstream`, or the answer to the last retry of a request it refused as too long: by an
    error status, or by a stream that failed before its answer began."""
    services, wire, route = exchange.services, exchange.wire, exchange.route
    while True:
        failure: bytes | None = None
        if upstream.status in OVERFLOW_STATUSES:
            upstream, rejection = await held(upstream, exchange.redact)
        elif wire.fails_in_stream and upstream.status == 200 and wire.is_stream(upstream.content_type):
            upstream, failure = await opening(upstream, wire)
            if failure is None:
                return upstream
            failure = exchange.redact(failure)
            rejection = classify(400, failure)
        else:
            return upstream
        if rejection.kind != "overflow":
            return upstream
        attempt = exchange.attempt
        if attempt.prediction is not None:
            window = window_of(rejection, attempt.output)
            services.projector.estimator.overflowed(attempt.prediction, rejection.input_tokens, window)
        if not rewriting or attempt.number > RETRIES:
            services.metrics.observe_overflow(route.name, "main", "relayed")
            return upstream
        services.metrics.observe_overflow(route.name, "main", "retried")
        call = attempt.call
        if failure is None:
            kind = record.consumed(call, wire, upstream, upstream.in_memory() or b"", exchange.t0, "overflow")
        else:
            kind = record.refused_in_stream(call, wire, upstream, failure, exchange.t0)
        record.noted(call, attempt=attempt.number, overflow=_numbers(rejection))
        upstream.close()
        exchange.follow(cut=lowered(attempt, rejection), number=attempt.number + 1)
        record.detach(call)  # a refused call is no branch's last call
        await exchange.finish(call, kind)
        answer = await resend()
        if answer is None:
            return None
        upstream = answer


def _numbers(rejection: Rejection) -> Mapping[str, int | str | None]:
    return {
        "window": rejection.window,
        "requested": rejection.requested,
        "input_tokens": rejection.input_tokens,
        "message": rejection.message,
    }

"""OpenTelemetry traces (the optional `otel` extra): a span per client model call, children for its steps.

Off unless the standard `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
set; then spans go over OTLP/HTTP through the SDK's batch processor, which the other standard
`OTEL_*` variables configure (`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`,
`OTEL_BSP_SCHEDULE_DELAY`...). Set while the packages are missing: one line says so and the proxy
serves untraced. This is the only module that imports opentelemetry, and its tracer provider is
the app's own (the process-global one is never set), so nothing leaks between apps or tests.

The request span (`chat {model}`, SERVER) covers the whole client request, the relayed stream
included (`Tracing.request`, around the ASGI call). Inside it, `span(name)` opens a live child
(`ctxproxy.projection`, `ctxproxy.recall` for a recall round's search), and `recorded(call)` adds a
span per call record as `Recorder.finish` completes it: each upstream attempt, recall round and
summarizer call (`chat {model}` or `summarize {model}`, CLIENT, timed by the record). The request's
main record also sets the request span's attributes: the GenAI semantic conventions' plus
ctxproxy's own (tokens of the client's history, sent, saved; checkpoint generation; recall rounds).
Attributes are names, ids and counts only: never message text, keys or headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .errors import ProxyError
from .store.base import CallRecord, tokens_saved

log = logging.getLogger("ctxproxy")

ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SERVICE_NAME = "ctxproxy"
OPERATIONS = {"main": "chat", "recall": "chat", "summary": "summarize"}


@dataclass(frozen=True)
class _Request:
    tracer: Any
    span: Any


_current: ContextVar[_Request | None] = ContextVar("ctxproxy_trace", default=None)


class Tracing:
    """The app's tracer provider and tracer; None from `from_env` when tracing is off."""

    def __init__(self, provider: Any, tracer: Any) -> None:
        self.provider = provider
        self.tracer = tracer

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tracing | None:
        env = os.environ if env is None else env
        if not any(env.get(name) for name in ENDPOINTS):
            return None
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.warning("tracing: OTEL_EXPORTER_OTLP_*ENDPOINT is set but the `otel` extra is not installed; no traces")
            return None
        resource = Resource.create({} if env.get("OTEL_SERVICE_NAME") else {"service.name": SERVICE_NAME})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider, provider.get_tracer("ctxproxy"))

    @contextlib.contextmanager
    def request(self, provider: str) -> Iterator[None]:
        """The request span of one client model call to `provider` (`Wire.provider`), current
        while it is served."""
        from opentelemetry import trace

        span = self.tracer.start_span("chat", kind=trace.SpanKind.SERVER, attributes=_provider(provider))
        token = _current.set(_Request(self.tracer, span))
        try:
            with trace.use_span(span, end_on_exit=True):
                yield
        finally:
            _current.reset(token)

    async def close(self) -> None:
        """Export what is pending (at shutdown), off the event loop."""
        await asyncio.to_thread(self.provider.shutdown)


@contextlib.contextmanager
def traced(tracing: Tracing | None, provider: str) -> Iterator[None]:
    """`Tracing.request`, or nothing when tracing is off."""
    if tracing is None:
        yield
        return
    with tracing.request(provider):
        yield


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[None]:
    """A live child of the current request span (nothing outside one)."""
    current = _current.get()
    if current is None:
        yield
        return
    with current.tracer.start_as_current_span(name, attributes=attributes):
        yield


def failed(exc: Exception) -> None:
    """The request was answered with an error raised by the proxy (`exc`)."""
    current = _current.get()
    if current is None:
        return
    from opentelemetry.trace import Status, StatusCode

    current.span.set_attribute("error.type", type(exc).__name__)
    if isinstance(exc, ProxyError):
        current.span.set_attribute("http.response.status_code", exc.status)
    current.span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def recorded(call: CallRecord, provider: str) -> None:
    """A span for `call`, just completed; a main call also describes the request span."""
    current = _current.get()
    if current is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    operation = OPERATIONS.get(call.purpose, call.purpose)
    attributes = {**_provider(provider), **_attributes(call, operation)}
    # the record is completed as its call ends; its latency runs from the moment it was sent
    end = time.time_ns()
    start = max(end - int((call.latency_ms or 0.0) * 1e6), getattr(current.span, "start_time", None) or 0)
    name = f"{operation} {call.model}" if call.model else operation
    child = current.tracer.start_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes, start_time=start)
    if call.status == "error":
        child.set_status(Status(StatusCode.ERROR, call.status))
    child.end(end_time=end)
    if call.purpose == "main":
        current.span.update_name(name)
        current.span.set_attributes(attributes)


def _provider(provider: str) -> dict[str, str]:
    """The client API's provider (`Wire.provider`), by both names the GenAI conventions have used."""
    return {"gen_ai.provider.name": provider, "gen_ai.system": provider}


def _attributes(call: CallRecord, operation: str) -> dict[str, Any]:
    projection = call.projection or {}
    usage = call.usage or {}
    values: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": call.model,
        "gen_ai.usage.input_tokens": usage.get("input_total"),
        "gen_ai.usage.output_tokens": usage.get("output"),
        "gen_ai.response.finish_reasons": [call.finish_reason] if call.finish_reason else None,
        "http.response.status_code": call.upstream_status,
        "ctxproxy.call_id": call.id,
        "ctxproxy.purpose": call.purpose,
        "ctxproxy.route": call.route,
        "ctxproxy.status": call.status,
        "ctxproxy.conversation_id": call.conversation_id,
        "ctxproxy.branch_id": call.branch_id,
        "ctxproxy.tokens.client": projection.get("client_tokens"),
        "ctxproxy.tokens.sent": projection.get("sent_tokens"),
        "ctxproxy.tokens.saved": tokens_saved(call.purpose, projection),
        "ctxproxy.checkpoint.generation": projection.get("checkpoint_generation"),
        "ctxproxy.recall.rounds": projection.get("recall_rounds", 0) if call.purpose == "main" else None,
    }
    return {key: value for key, value in values.items() if isinstance(value, (str, bool, int, float, list))}

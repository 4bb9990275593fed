"""OpenTelemetry traces (proxy/tracing.py): the real proxy, started with the standard OTLP variables,
exports its spans over OTLP/HTTP to a collector in this process, which decodes them with
opentelemetry-proto's own messages. A streamed call through the OpenAI SDK gives one request span
with the GenAI attributes and ctxproxy's, a projection span and an upstream span under it; a
streamed call with a recall detour adds the recall round's search and its upstream call; a
compaction's summarizer call is in the trace of the request that started it, and a request sent
from the checkpoint carries its generation and the tokens saved; a request the proxy refuses says
so; without the packages one line says so and calls are served."""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from proxy.tracing import Tracing
from tests.e2e.test_rewriting import SMALL_POLICY, SUMMARY, WINDOW, drive, is_summary_request, wait_checkpoints
from tests.support.e2e import user
from tests.support.proxy_process import UPSTREAM_KEY, ProxyProcess, deep_merge, default_config, subprocess_env
from tests.support.upstream_server import Reply, tool_call
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

POLICY = {
    "context_window": 128000,
    "max_output_tokens": 4096,
    "trigger": 0.02,  # the 12k-char tool result puts the request over it: old results are trimmed
    "target": 0.01,
    "late_trim": 0.02,
    "tool_results": {"keep_recent_groups": 1, "old_max_chars": 200, "recent_max_chars": 1000, "clear_at_least": 1},
    "recall": {"enabled": "auto"},
}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: POST /v1/traces, protobuf, each span kept as a dict."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    data = gzip.decompress(data)
                export = ExportTraceServiceRequest.FromString(data)
                for resource in export.resource_spans:
                    service = {a.key: _value(a.value) for a in resource.resource.attributes}.get("service.name")
                    for scope in resource.scope_spans:
                        collector.spans.extend(collector.read(span, service) for span in scope.spans)
                body = ExportTraceServiceResponse().SerializeToString()
                ok = self.path == "/v1/traces"
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @staticmethod
    def read(span: Span, service: Any) -> dict[str, Any]:
        return {
            "name": span.name,
            "kind": Span.SpanKind.Name(span.kind),
            "trace": span.trace_id.hex(),
            "id": span.span_id.hex(),
            "parent": span.parent_span_id.hex(),
            "start": span.start_time_unix_nano,
            "end": span.end_time_unix_nano,
            "attributes": {a.key: _value(a.value) for a in span.attributes},
            "service": service,
        }

    def trace_of(self, conversation: str, spans: int) -> list[dict[str, Any]]:
        """The spans of the trace whose request span names `conversation`, once `spans` arrived."""

        def found() -> list[dict[str, Any]] | None:
            roots = [
                s
                for s in list(self.spans)
                if s["kind"] == "SPAN_KIND_SERVER" and s["attributes"].get("ctxproxy.conversation_id") == conversation
            ]
            if not roots:
                return None
            trace = [s for s in list(self.spans) if s["trace"] == roots[-1]["trace"]]
            return trace if len(trace) >= spans else None

        return wait_until(found, timeout=15, what=f"{spans} spans of conversation {conversation}")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def traced_proxy(upstream_server: Any, closed_port: int, workdir: Path, policy: Any) -> Iterator[Any]:
    """A proxy exporting its spans to a new `Collector`, with `policy` as its default."""
    collector = Collector()
    config = deep_merge(default_config(upstream_server.base_url, closed_port), {"policies": {"default": policy}})
    env = {**subprocess_env(), "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    p = ProxyProcess(config, workdir, env).start()
    try:
        yield p, collector
    finally:
        p.stop()
        collector.stop()


@pytest.fixture(scope="module")
def traced(upstream_server: Any, closed_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with traced_proxy(upstream_server, closed_port, Path(tmp_path_factory.mktemp("otel")), POLICY) as both:
        yield both


def _conversation(p: ProxyProcess, header: str) -> str:
    conversation = p.conversation(header)["id"]
    assert isinstance(conversation, str)
    return conversation


def _no_secrets(spans: list[dict[str, Any]], api_key: str) -> None:
    text = json.dumps([s["attributes"] for s in spans])
    assert UPSTREAM_KEY not in text and api_key not in text


def test_a_streamed_call_is_one_request_span_with_its_projection_and_upstream_call(traced, upstream, api_key):
    p, collector = traced
    upstream.push(Reply(content="traced answer", chunks=3, prompt_tokens=41, completion_tokens=7))
    client = p.client(api_key)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[user(f"trace me {uuid.uuid4().hex}")], stream=True
    )
    conversation = _conversation(p, raw.headers["x-conversation-id"])
    assert "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices) == "traced answer"
    spans = collector.trace_of(conversation, 3)
    [root] = [s for s in spans if s["kind"] == "SPAN_KIND_SERVER"]
    assert root["name"] == "chat gpt-4o" and root["parent"] == "" and root["service"] == "ctxproxy"
    attributes = root["attributes"]
    assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "gpt-4o"
    assert attributes["gen_ai.provider.name"] == "openai" and attributes["gen_ai.system"] == "openai"
    assert attributes["gen_ai.usage.input_tokens"] == 41 and attributes["gen_ai.usage.output_tokens"] == 7
    assert attributes["http.response.status_code"] == 200 and attributes["ctxproxy.status"] == "complete"
    assert attributes["ctxproxy.tokens.client"] > 0 and attributes["ctxproxy.tokens.sent"] > 0
    assert (
        attributes["ctxproxy.tokens.saved"] == attributes["ctxproxy.tokens.client"] - attributes["ctxproxy.tokens.sent"]
    )
    assert attributes["ctxproxy.recall.rounds"] == 0 and attributes["ctxproxy.branch_id"]
    children = {s["name"]: s for s in spans if s["parent"] == root["id"]}
    assert set(children) == {"ctxproxy.projection", "chat gpt-4o"}, spans
    call = children["chat gpt-4o"]
    assert call["kind"] == "SPAN_KIND_CLIENT" and call["attributes"]["ctxproxy.purpose"] == "main"
    projection = children["ctxproxy.projection"]
    assert root["start"] <= projection["start"] <= projection["end"] <= call["end"] <= root["end"]
    assert root["start"] <= call["start"] < call["end"]
    _no_secrets(spans, api_key)


def test_a_request_the_proxy_refuses_has_its_error_and_status(traced, api_key):
    p, collector = traced
    assert p.post_chat(api_key, {"model": "gpt-4o", "messages": []}).status_code == 400

    def refused() -> dict[str, Any] | None:
        spans = [s for s in list(collector.spans) if s["attributes"].get("error.type") == "BadRequest"]
        return spans[-1] if spans else None

    span = wait_until(refused, timeout=15, what="the refused request's span")
    assert span["kind"] == "SPAN_KIND_SERVER" and span["name"] == "chat"
    assert span["attributes"]["http.response.status_code"] == 400


def test_a_recall_detour_adds_the_search_and_its_upstream_call(traced, upstream, api_key):
    p, collector = traced
    client = p.client(api_key)
    first = tool_call("bash", {"cmd": "cat /etc/app.conf"})
    upstream.push(Reply(tool_calls=[first]))
    history = [user(f"otel-recall {uuid.uuid4().hex} Read the config, please.")]
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, tools=TOOLS)
    conversation = _conversation(p, raw.headers["x-conversation-id"])
    history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
    history.append({"role": "tool", "tool_call_id": first["id"], "content": "a" * 6000 + " port = 48443 " + "b" * 6000})
    for i in range(2):
        upstream.push(Reply(content=f"noted {i}"))
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, tools=TOOLS)
        history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        history.append(user(f"carry on {i}"))
    collector.spans.clear()
    history.append(user("Which port does the config set?"))
    upstream.push(Reply(tool_calls=[tool_call("ctxproxy_recall", {"query": "port"}, id="call_recall_1")], chunks=3))
    upstream.push(Reply(content="Port 48443.", chunks=3))
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, tools=TOOLS, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Port 48443."
    spans = collector.trace_of(conversation, 5)
    [root] = [s for s in spans if s["kind"] == "SPAN_KIND_SERVER"]
    assert root["attributes"]["ctxproxy.recall.rounds"] == 1 and root["attributes"]["ctxproxy.purpose"] == "main"
    calls = [s["attributes"]["ctxproxy.purpose"] for s in spans if s["kind"] == "SPAN_KIND_CLIENT"]
    assert sorted(calls) == ["main", "recall"], spans
    [search] = [s for s in spans if s["name"] == "ctxproxy.recall"]
    assert search["attributes"]["ctxproxy.recall.round"] == 1 and search["parent"] == root["id"]
    assert all(s["trace"] == root["trace"] for s in spans)
    _no_secrets(spans, api_key)


def test_a_compaction_started_by_a_request_is_in_its_trace(upstream, closed_port, tmp_path, api_key, monkeypatch):
    model = "gpt-otel-compaction"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    upstream.responder = lambda body: Reply(content=SUMMARY) if is_summary_request(body) else None
    with traced_proxy(upstream, closed_port, tmp_path, SMALL_POLICY) as (p, collector):
        client = p.client(api_key)
        messages: list[dict[str, Any]] = [user(f"compaction {uuid.uuid4().hex}")]
        header = drive(client, model, messages, 25, words=120)
        wait_checkpoints(p, header)

        def summarized() -> list[dict[str, Any]] | None:
            spans = list(collector.spans)
            summaries = [s for s in spans if s["attributes"].get("ctxproxy.purpose") == "summary"]
            requests = {s["trace"]: s for s in spans if s["kind"] == "SPAN_KIND_SERVER"}
            return [requests[s["trace"]] for s in summaries if s["trace"] in requests] or None

        [request, *_] = wait_until(summarized, timeout=15, what="a summarizer span in a request's trace")
        assert request["attributes"]["ctxproxy.conversation_id"] == _conversation(p, header)
        summary = next(s for s in collector.spans if s["attributes"].get("ctxproxy.purpose") == "summary")
        assert summary["name"] == f"summarize {model}" and summary["kind"] == "SPAN_KIND_CLIENT"
        messages.append(user("one more"))
        client.chat.completions.create(model=model, messages=messages)
        conversation = _conversation(p, header)

        def from_checkpoint() -> dict[str, Any] | None:
            roots = [
                s["attributes"]
                for s in list(collector.spans)
                if s["kind"] == "SPAN_KIND_SERVER"
                and s["attributes"].get("ctxproxy.conversation_id") == conversation
                and s["attributes"].get("ctxproxy.checkpoint.generation")
            ]
            return roots[-1] if roots else None

        attributes = wait_until(from_checkpoint, timeout=15, what="a request span sent from a checkpoint")
        assert attributes["ctxproxy.checkpoint.generation"] >= 1 and attributes["ctxproxy.tokens.saved"] > 0


def test_without_the_packages_one_line_says_so_and_calls_are_served(upstream_server, closed_port, tmp_path, api_key):
    hidden = tmp_path / "hidden"
    (hidden / "opentelemetry").mkdir(parents=True)
    (hidden / "opentelemetry" / "__init__.py").write_text("raise ImportError('the otel extra is not installed')\n")
    env = subprocess_env()
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", PYTHONPATH=f"{hidden}:{env['PYTHONPATH']}")
    (tmp_path / "proxy").mkdir()
    p = ProxyProcess(default_config(upstream_server.base_url, closed_port), tmp_path / "proxy", env).start()
    try:
        upstream_server.push(Reply(content="untraced"))
        answer = p.client(api_key).chat.completions.create(model="gpt-4o", messages=[user("no otel here")])
        assert answer.choices[0].message.content == "untraced"
        assert p.stderr().count("the `otel` extra is not installed") == 1
    finally:
        p.stop()


def test_off_unless_an_endpoint_is_set():
    assert Tracing.from_env({"OTEL_SERVICE_NAME": "x"}) is None
    tracing = Tracing.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"})
    assert tracing is not None
    tracing.provider.shutdown()

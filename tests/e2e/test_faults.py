"""Upstream faults over all three APIs, against the raw-socket fault upstream
(tests/support/fault_upstream.py): truncated answers are 502s in the API's error shape and
recorded as failed; a client that hangs up before a whole answer leaves a record that is not
`complete`; and the measured matrix -- every fault x stream/non-stream x API ends within its
deadline + 1 s, in the API's error shape or with a well-formed SSE ending, with no retry, and
0 tracebacks in the proxy's log."""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.e2e import user
from tests.support.fault_upstream import Fault, FaultUpstream
from tests.support.measure import report

pytestmark = pytest.mark.slow

FIRST_BYTE, IDLE, TOTAL = 1.0, 1.0, 4.0
APIS = ("chat", "responses", "anthropic")
MODELS = {"chat": "fault-gpt", "responses": "fault-resp", "anthropic": "fault-claude"}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


def fault_routes(server: FaultUpstream, **deadlines: float) -> list[dict[str, Any]]:
    timeouts = {"connect": 2, "first_byte": FIRST_BYTE, "idle": IDLE, "total": TOTAL, **deadlines}

    def route(api: str, base_url: str, path: str) -> dict[str, Any]:
        upstream = {"base_url": base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": timeouts}
        return {"name": api, "match": {"model": MODELS[api], "path": path}, "upstream": upstream, "policy": "default"}

    return [
        route("chat", f"{server.url}/v1", "/v1/chat/completions"),
        route("responses", f"{server.url}/v1", "/v1/responses"),
        route("anthropic", server.url, "/v1/messages"),
    ]


@pytest.fixture
def faulty(proxy, faults):
    return proxy(routes=fault_routes(faults))


def request_body(api: str, text: str, stream: bool, history: list[Any] | None = None) -> dict[str, Any]:
    messages = [*(history or []), user(text)]
    if api == "responses":
        return {"model": MODELS[api], "input": messages, "stream": stream}
    body: dict[str, Any] = {"model": MODELS[api], "messages": messages, "stream": stream}
    if api == "anthropic":
        body["max_tokens"] = 100
    return body


def post(p, api: str, api_key: str, body: dict[str, Any], timeout: float = 30) -> tuple[httpx.Response, bytes, float]:
    """POST and read the whole answer; returns the response, its bytes and the seconds it took."""
    headers = {"Authorization": f"Bearer {api_key}", "x-api-key": api_key, "anthropic-version": "2023-06-01"}
    t0 = time.monotonic()
    with httpx.stream("POST", p.url + PATHS[api], json=body, headers=headers, timeout=timeout) as r:
        data = r.read()
    return r, data, time.monotonic() - t0


def assert_api_error(api: str, r: httpx.Response, data: bytes, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, data[:300])
    body = json.loads(data)
    if api == "anthropic":
        assert body["type"] == "error" and isinstance(body["error"]["message"], str), body
        return body["error"]
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body
    return body["error"]


def start_conversation(p, faults: FaultUpstream, api: str, api_key: str, text: str) -> tuple[str, list[Any]]:
    """One good turn: the conversation id and the history to continue it with."""
    faults.push(Fault(text=f"answer to {text}"))
    r, data, _ = post(p, api, api_key, request_body(api, text, False))
    assert r.status_code == 200, data[:300]
    return r.headers["x-conversation-id"], [user(text), {"role": "assistant", "content": f"answer to {text}"}]


@pytest.mark.parametrize("kind", ["truncated", "truncated_eof"])
@pytest.mark.parametrize("api", APIS)
def test_truncated_whole_answer_is_502_and_recorded_failed(faulty, faults, api_key, api, kind):
    conv, history = start_conversation(faulty, faults, api, api_key, f"cut next {api} {kind}")
    faults.push(Fault(kind))
    r, data, _ = post(faulty, api, api_key, request_body(api, "and now?", False, history))
    error = assert_api_error(api, r, data, 502)
    assert "cut off" in error["message"] or "broke off" in error["message"], error
    calls = faulty.wait_calls(conv, 2)
    assert calls[-1]["status"] == "error" and calls[-1]["error"], calls[-1]


@pytest.mark.parametrize("api", APIS)
def test_non_json_whole_answer_is_502(faulty, faults, api_key, api):
    faults.push(Fault("malformed"))
    r, data, _ = post(faulty, api, api_key, request_body(api, f"garbage {uuid.uuid4()}", False))
    assert_api_error(api, r, data, 502)


@pytest.mark.parametrize("api", APIS)
def test_whole_answer_nested_past_every_decoders_depth_is_502_and_recorded(faulty, faults, api_key, api):
    conv, history = start_conversation(faulty, faults, api, api_key, f"deep next {api}")
    faults.push(Fault("deep"))
    r, data, _ = post(faulty, api, api_key, request_body(api, "and deeper?", False, history))
    error = assert_api_error(api, r, data, 502)
    assert "nested too deep" in error["message"], error
    calls = faulty.wait_calls(conv, 2)
    assert calls[-1]["status"] == "error" and "not complete JSON" in calls[-1]["error"], calls[-1]


@pytest.mark.parametrize("api", APIS)
def test_client_hanging_up_before_a_whole_answer_is_not_complete(faulty, faults, api_key, api):
    """The client gives up while the upstream is still working on a non-streamed answer."""
    conv, history = start_conversation(faulty, faults, api, api_key, f"hang up next {api}")
    faults.push(Fault("stall_first"))
    body = request_body(api, "slow one", False, history)
    with pytest.raises(httpx.ReadTimeout):
        post(faulty, api, api_key, body, timeout=0.5)
    faults.wait_cancelled(1)
    calls = faulty.wait_calls(conv, 2)
    assert calls[-1]["status"] == "partial", calls[-1]
    assert "client" in calls[-1]["error"], calls[-1]


# ---- the measured matrix

KINDS = (
    "status_500",
    "status_429",
    "refused",
    "reset",
    "stall_first",
    "stall_mid",
    "malformed",
    "truncated",
    "no_usage",
    "dup_usage",
)
HEADERS_WITHIN = 2 + FIRST_BYTE  # connect + first_byte: the deadline for the response head


def deadline(kind: str, stream: bool) -> float:
    if kind == "stall_first":
        return HEADERS_WITHIN
    if kind == "stall_mid":
        return IDLE if stream else TOTAL
    return 2.0  # everything else is answered at once


def fault_for(kind: str) -> Fault:
    if kind.startswith("status_"):
        status = int(kind.split("_")[1])
        return Fault("status", status=status, retry_after="7" if status == 429 else None)
    return Fault(kind)


def sse_events(data: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) per event; every event must be complete (ends with a blank line)."""
    text = data.decode()
    assert text.endswith("\n\n"), f"stream does not end on an event boundary: {text[-200:]!r}"
    out = []
    for block in text.strip("\n").split("\n\n"):
        name = None
        payload = []
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            assert field in ("event", "data", "id", "retry", ""), f"not an SSE line: {line!r}"
            if field == "event":
                name = value.strip()
            elif field == "data":
                payload.append(value.strip())
        out.append((name, "\n".join(payload)))
    return out


def stream_ending(api: str, events: list[tuple[str | None, str]]) -> str:
    """`end` (the API's end event), `error` (its error event) or what the last event was."""
    name, payload = events[-1]
    if api == "chat":
        if payload == "[DONE]":
            return "end"
        return "error" if "error" in json.loads(payload) else payload
    if name == "error":
        json.loads(payload)
        return "error"
    ends = {"responses": "response.completed", "anthropic": "message_stop"}
    return "end" if name == ends[api] else str(name)


def expected(kind: str, stream: bool) -> tuple[int, str]:
    """(status, `error` | `end` | `error_event`) a client should see."""
    if kind == "status_500":
        return 500, "error"
    if kind == "status_429":
        return 429, "error"
    if kind in ("refused", "reset", "malformed", "truncated") and not stream:
        return 502, "error"
    if kind in ("refused", "reset"):
        return 502, "error"
    if kind == "stall_first":
        return 504, "error"
    if kind == "stall_mid":
        return (200, "error_event") if stream else (504, "error")
    if kind == "truncated":
        return 200, "error_event"
    return 200, "end"  # malformed stream events are relayed; no_usage, dup_usage complete


def run_case(p, faults: FaultUpstream, api_key: str, api: str, kind: str, stream: bool) -> dict[str, Any]:
    marker = f"fault-{kind}-{api}-{stream}-{uuid.uuid4().hex[:8]}"
    faults.script(marker, fault_for(kind))
    body = request_body(api, marker, stream)
    if kind == "refused":
        body["model"] = "refused-" + MODELS[api]
    r, data, elapsed = post(p, api, api_key, body)
    status, ending = expected(kind, stream)
    assert r.status_code == status, (api, kind, stream, r.status_code, data[:300])
    if ending == "error":
        assert_api_error(api, r, data, status)
        if kind == "status_429":
            assert r.headers.get("retry-after") == "7"
    elif stream:
        got = stream_ending(api, sse_events(data))
        assert got == ("end" if ending == "end" else "error"), (api, kind, got, data[-300:])
    else:
        assert json.loads(data)
    attempts = faults.count(marker)
    assert attempts == (0 if kind == "refused" else 1), f"{api} {kind}: {attempts} upstream attempts"
    return {
        "case": f"{api} {kind} stream={stream}",
        "elapsed": elapsed,
        "over": elapsed - deadline(kind, stream),
        "attempts": attempts,
    }


def test_fault_matrix(proxy, faults, api_key, closed_port):
    refused = [
        {
            **route,
            "name": f"refused-{route['name']}",
            "match": {**route["match"], "model": "refused-" + route["match"]["model"]},
            "upstream": {
                **route["upstream"],
                "base_url": route["upstream"]["base_url"].replace(f":{faults.port}", f":{closed_port}"),
            },
        }
        for route in fault_routes(faults)
    ]
    p = proxy(routes=[*fault_routes(faults), *refused])
    for api in APIS:  # warm up (tokenizer, first store writes): the deadlines are for steady state
        assert post(p, api, api_key, request_body(api, f"warm-up {uuid.uuid4()}", False))[0].status_code == 200
    mark = p.log_mark()
    cases = [(api, kind, stream) for api in APIS for kind in KINDS for stream in (False, True)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: run_case(p, faults, api_key, *c), cases))
    log = p.stderr_since(mark)
    assert "Traceback" not in log, log[-3000:]
    worst = max(r["over"] for r in results)
    late = [f"{r['case']}: {r['elapsed']:.2f} s" for r in results if r["over"] > 1]
    assert not late, f"past deadline + 1 s: {late}"
    report(
        "upstream faults",
        cases=len(cases),
        ok=len(results),
        worst_over_deadline_s=round(worst, 2),
        max_upstream_attempts=max(r["attempts"] for r in results),
        tracebacks=log.count("Traceback"),
    )

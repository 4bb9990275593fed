"""Streaming: usage chunk handling, incremental delivery, and streams that end early."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from tests.support.e2e import json_chunks, sse_payloads, stream_raw, user, without_usage
from tests.support.upstream_server import Reply, _split


@pytest.mark.parametrize("stream_options", [None, {"include_usage": False}])
def test_usage_hidden_from_client_that_did_not_ask(proxy, upstream, api_key, stream_options):
    p = proxy()
    upstream.push(Reply(content="no usage for you", chunks=4, cached_tokens=1))
    body = {"model": "gpt-4o", "stream": True, "messages": [user("hidden usage")]}
    if stream_options is not None:
        body["stream_options"] = stream_options
    r, lines = stream_raw(p.base_url, api_key, body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    # the proxy asked upstream for usage ...
    assert upstream.last_chat.body["stream_options"]["include_usage"] is True
    sent = upstream.last_reply.sent_chunks()
    assert sent[-1]["choices"] == [] and sent[-1]["usage"] is not None
    # ... and the client sees exactly what the real API sends without include_usage
    payloads = sse_payloads(lines)
    assert payloads[-1] == "[DONE]"
    chunks = json_chunks(payloads)
    assert chunks == without_usage(sent)
    assert all("usage" not in c for c in chunks)
    assert not any('"usage"' in line for line in lines)


def test_usage_chunk_relayed_to_client_that_asked(proxy, upstream, api_key):
    p = proxy()
    upstream.push(Reply(content="usage for you", chunks=3, cached_tokens=2, reasoning_tokens=1))
    body = {
        "model": "gpt-4o",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [user("visible usage")],
    }
    r, lines = stream_raw(p.base_url, api_key, body)
    assert r.status_code == 200
    payloads = sse_payloads(lines)
    assert payloads[-1] == "[DONE]"
    chunks = json_chunks(payloads)
    assert chunks == upstream.last_reply.sent_chunks()
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    assert all(c["usage"] is None for c in chunks[:-1])


def test_incremental_delivery(proxy, upstream, api_key):
    """The first chunk reaches the client while upstream is still holding the rest."""
    p = proxy()
    hold = threading.Event()
    reply = Reply(content="first then the rest", chunks=3, hold=hold)
    upstream.push(reply)
    body = {"model": "gpt-4o", "stream": True, "messages": [user("incremental")]}
    try:
        with httpx.stream(
            "POST",
            f"{p.base_url}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(30, read=10),
        ) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data:"))
            # still held upstream: only the first chunk can have been produced
            assert not hold.is_set() and reply.chunks_sent == 1
            assert json.loads(first[5:])["choices"][0]["delta"]["role"] == "assistant"
            hold.set()
            rest = sse_payloads(list(lines))
    finally:
        hold.set()
    assert rest[-1] == "[DONE]"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in json_chunks(rest) if c["choices"])
    assert text == "first then the rest"


def test_client_disconnect_mid_stream_records_partial(proxy, upstream, api_key):
    p = proxy()
    content = "Hello partial world, never finished."
    hold = threading.Event()
    # role chunk + 2 content pieces, then upstream holds
    reply = Reply(content=content, chunks=4, hold=hold, hold_after_chunks=3)
    upstream.push(reply)
    body = {"model": "gpt-4o", "stream": True, "messages": [user("disconnect me")]}
    try:
        with httpx.stream(
            "POST",
            f"{p.base_url}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(30, read=10),
        ) as r:
            conv = r.headers["x-conversation-id"]
            seen = []
            for line in r.iter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
                if len(seen) == 3:
                    break
        # leaving the block closed the connection while upstream is still holding
        calls = p.wait_calls(conv, 1, until=lambda cs: cs[-1]["status"] != "pending")
    finally:
        hold.set()
    call = calls[-1]
    assert call["status"] == "partial", call
    assert call["stream"] is True
    assert call["response"] is not None
    assert call["response"]["content"] == "".join(_split(content, 4)[:2])
    # the proxy stopped reading from upstream instead of draining it for nobody
    assert reply.disconnected.wait(10), "proxy kept the upstream stream open after the client left"


def test_upstream_drops_mid_stream(proxy, upstream, api_key):
    p = proxy()
    content = "abcdefghijklmnop"
    upstream.push(Reply(content=content, chunks=4, drop_after_chunks=3))
    body = {"model": "gpt-4o", "stream": True, "messages": [user("drop midway")]}
    lines: list[str] = []
    conv = None
    try:
        with httpx.stream(
            "POST",
            f"{p.base_url}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(30, read=15),
        ) as r:
            conv = r.headers["x-conversation-id"]
            for line in r.iter_lines():
                lines.append(line)
    except httpx.RemoteProtocolError:
        pass  # an aborted relay is acceptable; a hang is not (read timeout fails the test)
    assert conv
    chunks = [c for c in json_chunks([x for x in sse_payloads(lines) if x != "[DONE]"]) if "choices" in c]
    assert chunks[:3] == without_usage(upstream.last_reply.sent_chunks())[:3]
    assert not any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks), (
        "proxy invented a finish_reason for a truncated stream"
    )
    call = p.wait_calls(conv, 1, until=lambda cs: cs[-1]["status"] != "pending")[-1]
    assert call["status"] == "partial", call
    assert call["response"]["content"] == "".join(_split(content, 4)[:2])


def test_idle_timeout_mid_stream_records_partial(proxy, upstream, api_key):
    """slow-* has idle=1 s: a stream that stalls after its first chunks is cut, not hung."""
    p = proxy()
    content = "stalls after a while"
    hold = threading.Event()
    reply = Reply(content=content, chunks=4, hold=hold, hold_after_chunks=2)
    upstream.push(reply)
    body = {"model": "slow-model", "stream": True, "messages": [user("stall")]}
    lines: list[str] = []
    try:
        try:
            with httpx.stream(
                "POST",
                f"{p.base_url}/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {api_key}"},
                timeout=httpx.Timeout(30, read=15),
            ) as r:
                conv = r.headers["x-conversation-id"]
                for line in r.iter_lines():
                    lines.append(line)
        except httpx.RemoteProtocolError:
            pass
        call = p.wait_calls(conv, 1, until=lambda cs: cs[-1]["status"] != "pending")[-1]
    finally:
        hold.set()
    assert call["status"] == "partial", call
    assert call["response"]["content"] == _split(content, 4)[0]
    chunks = [c for c in json_chunks([x for x in sse_payloads(lines) if x != "[DONE]"]) if "choices" in c]
    assert chunks[:2] == without_usage(reply.sent_chunks())
    assert not any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks)

"""Bodies that extend the previous one byte for byte (parsed only in their new tail, see
`proxy/tail_parse.py`) are served exactly as if parsed whole: the conversation continues, the
upstream gets the client's bytes, and a hostile tail is the same 400 as in a whole body, with
nothing stored or forwarded."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.support.e2e import assert_openai_error


def _body(messages: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": "gpt-4o", "messages": messages, "temperature": 0}).encode()


def _grown(raw: bytes, tail: bytes) -> bytes:
    close = raw.rindex(b"]")  # the messages array closes last here
    return raw[:close] + b", " + tail + raw[close:]


def _mine(upstream: Any, marker: str) -> list[Any]:
    return [r for r in upstream.chat_requests if marker.encode() in r.raw]


def test_a_growing_history_continues_and_a_hostile_tail_is_refused_as_in_a_whole_body(proxy, upstream, api_key):
    p = proxy()
    marker = uuid.uuid4().hex
    messages = [{"role": "system", "content": "terse"}, {"role": "user", "content": f"task {marker} " + '"]}" é'}]
    conversation = None
    for turn in range(4):
        raw = _body(messages)
        r = p.post_chat(api_key, raw)
        assert r.status_code == 200, r.text[:300]
        conversation = conversation or r.headers["x-conversation-id"]
        assert r.headers["x-conversation-id"] == conversation
        sent = _mine(upstream, marker)[-1]  # not rewritten: the client's bytes go as they are, plus a cache key
        assert sent.raw == b'{"prompt_cache_key":"' + sent.body["prompt_cache_key"].encode() + b'",' + raw[1:]
        messages = messages + [r.json()["choices"][0]["message"], {"role": "user", "content": f"next {turn}"}]
    stored = [e["message"] for e in p.events(conversation)]
    assert stored == messages[1:-1]

    sent = len(_mine(upstream, marker))
    hostile = {
        b'{"role": "user", "content": ' + b"[" * 127 + b"]" * 127 + b"}": "nested more than 128",
        b'{"role": "user", "content": "x", "n": 18446744073709551616}': "64 bits",
        b'{"role": "user", "content": "x"}}': "could not parse",
        b'{"role": "user", "content": "x"}, ': "could not parse",
    }
    for tail, error in hostile.items():
        r = p.post_chat(api_key, _grown(raw, tail))
        assert error in assert_openai_error(r, 400)["message"], tail
    assert len(_mine(upstream, marker)) == sent
    assert [e["message"] for e in p.events(conversation)] == stored

    lone = _grown(raw, b'{"role": "user", "content": "\\ud800 alone"}')  # orjson refuses it; the stdlib reads it
    r = p.post_chat(api_key, lone)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-conversation-id"] == conversation
    assert p.events(conversation)[-2]["message"]["content"] == "\ud800 alone"


def test_another_key_extending_the_same_bytes_is_its_own_tenant(proxy, upstream, api_key):
    p = proxy()
    marker = uuid.uuid4().hex
    first = _body([{"role": "user", "content": f"shared {marker}"}])
    r = p.post_chat(api_key, first)
    assert r.status_code == 200, r.text[:300]
    answer = json.dumps(r.json()["choices"][0]["message"]).encode()
    grown = _grown(first, answer + b', {"role": "user", "content": "b"}')
    other = p.post_chat(f"sk-other-{uuid.uuid4().hex}", grown)
    assert other.status_code == 200, other.text[:300]
    assert other.headers["x-conversation-id"] != r.headers["x-conversation-id"]
    assert [e["message"]["content"] for e in p.events(other.headers["x-conversation-id"])][:1] == [f"shared {marker}"]

"""Hostile JSON is a 400 in each API's own error shape on all three wires, never a 500, and
leaves nothing stored: a body nested 100,000 deep (a recursion error in a recursive decoder) and
an integer of 5,000 digits (beyond what Python reads as an int)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.e2e import assert_openai_error

DEEP = "[" * 100_000 + "]" * 100_000
JUST_TOO_DEEP = "[" * 129 + "]" * 129
HUGE = "9" * 5_000


def _chat(field: str) -> str:
    return '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], ' + field + "}"


def _anthropic(field: str) -> str:
    return '{"model": "gpt-4o", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], ' + field + "}"


def _responses(field: str) -> str:
    return '{"model": "gpt-4o", "input": "hi", ' + field + "}"


WIRES = {
    "chat": ("/v1/chat/completions", _chat, "max_tokens"),
    "anthropic": ("/v1/messages", _anthropic, "max_tokens"),
    "responses": ("/v1/responses", _responses, "max_output_tokens"),
}


def _bodies(wire: str) -> dict[str, str]:
    _, build, limit = WIRES[wire]
    bodies = {
        "deep": build(f'"metadata": {DEEP}'),
        "just_too_deep": build(f'"metadata": {JUST_TOO_DEEP}'),
        "huge_int": build(f'"{limit}": {HUGE}'),
        "int_over_64_bits": build(f'"{limit}": 18446744073709551616'),
        "huge_negative_int": build(f'"{limit}": -{HUGE}'),
    }
    if wire == "anthropic":  # its own max_tokens is the field that carries the huge number
        bodies["huge_int"] = '{"model": "gpt-4o", "max_tokens": ' + HUGE + ', "messages": []}'
    return bodies


def _assert_shape(wire: str, response: httpx.Response) -> None:
    assert response.status_code == 400, f"{response.status_code}: {response.text[:300]}"
    if wire == "anthropic":
        body = response.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        message = body["error"]["message"]
    else:
        message = assert_openai_error(response, 400)["message"]
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert "nested more than 128" in message or "64 bits" in message, message


def _conversations(p: Any) -> list[dict[str, Any]]:
    return p.admin_json("conversations", params={"limit": 50})["data"]


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_hostile_json_is_a_400_in_the_wires_shape_and_stores_nothing(proxy, upstream, api_key, wire):
    p = proxy()
    path = WIRES[wire][0]
    before = _conversations(p)
    n = len(upstream.requests)
    headers = {"Authorization": f"Bearer {api_key}", "x-api-key": api_key, "Content-Type": "application/json"}
    for case, body in _bodies(wire).items():
        r = httpx.post(f"{p.url}{path}", content=body.encode(), headers=headers, timeout=30)
        try:
            _assert_shape(wire, r)
        except AssertionError as exc:
            raise AssertionError(f"{wire} {case}: {exc}") from None
    assert len(upstream.requests) == n, "a refused body reached the upstream"
    assert _conversations(p) == before, "a refused body stored a conversation"


def test_deep_tool_arguments_are_compared_as_text_not_a_500(proxy, upstream, api_key):
    """Tool-call arguments are a string the proxy parses only to compare them: too deep to parse
    is compared as the text, and the request is served."""
    p = proxy()
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": DEEP}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
    ]
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": messages})
    assert r.status_code == 200, r.text[:300]
    conv = r.headers["x-conversation-id"]
    events = p.events(conv)
    assert [e["message"]["role"] for e in events][:3] == ["user", "assistant", "tool"]
    assert events[1]["message"]["tool_calls"][0]["function"]["arguments"] == DEEP

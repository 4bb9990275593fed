"""Small helpers shared by the end-to-end tests (no fixtures here; see tests/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from policies.shared_prompt import OPENING
from tests.support.waiting import wait_until

ERROR_KEYS = {"message", "type", "param", "code"}


def asks_shared_summary(body: Any) -> bool:
    """A shared summary request (`summarizer.mode: auto`, the default, or `shared`): the
    conversation's own request with ctxproxy's ask last, on any wire (messages, input, contents).
    A scripted upstream answers it as a summary request, as a real model asked for one would."""
    if not isinstance(body, dict):
        return False
    for key in ("messages", "input", "contents"):
        items = body.get(key)
        if isinstance(items, list) and items:
            return OPENING in json.dumps(items[-1])
    return False


def sse_payloads(lines: list[str]) -> list[str]:
    """The ``data:`` payloads of an SSE stream, in order (``[DONE]`` included)."""
    return [line[5:].strip() for line in lines if line.startswith("data:")]


def json_chunks(payloads: list[str]) -> list[dict[str, Any]]:
    return [json.loads(p) for p in payloads if p != "[DONE]"]


def without_usage(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the real API sends when the client did not ask for usage: no usage chunk, no key."""
    out = []
    for c in chunks:
        if c.get("choices") == [] and "usage" in c:
            continue
        c = dict(c)
        c.pop("usage", None)
        out.append(c)
    return out


def stream_raw(
    url: str, api_key: str, body: dict[str, Any], headers: dict[str, str] | None = None, timeout: float = 30
) -> tuple[httpx.Response, list[str]]:
    """POST a streaming request with plain httpx; returns the response and its raw lines."""
    h = {"Authorization": f"Bearer {api_key}"}
    h.update(headers or {})
    with httpx.stream("POST", f"{url}/chat/completions", json=body, headers=h, timeout=timeout) as r:
        lines = list(r.iter_lines())
    return r, lines


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {response.text[:500]}"
    try:
        body = response.json()
    except ValueError:
        raise AssertionError(f"error body is not JSON: {response.text[:500]!r}") from None
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    assert ERROR_KEYS <= set(body["error"]), f"error object lacks keys: {body}"
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return body["error"]


def view(message: dict[str, Any]) -> tuple[Any, ...]:
    """The parts of a message that must survive storage: role, text, tool ids/calls."""
    calls = tuple(
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in (message.get("tool_calls") or [])
    )
    content = message.get("content")
    if content == "" and calls:
        content = None  # "" and null are the same thing next to tool calls
    return (message.get("role"), content, calls, message.get("tool_call_id"))


def event_views(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [view(e["message"]) for e in events]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def sent_verbatim_in_all(value: Any, raws: list[bytes]) -> bool:
    """Whether one serialization of `value` (the SDKs' spaced JSON or the proxy's compact one)
    appears byte for byte in every raw request body: the same bytes on every request."""
    forms = (json.dumps(value).encode(), json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    return any(all(form in raw for raw in raws) for form in forms)


def active_checkpoint(p: Any, conversation: str, timeout: float = 30) -> dict[str, Any]:
    """The conversation's active checkpoint, once a compaction (in the background) committed one."""

    def active() -> dict[str, Any] | None:
        rows = p.admin_json(f"conversations/{conversation}/checkpoints")["data"]
        return next((c for c in rows if c["status"] == "active"), None)

    found: dict[str, Any] = wait_until(active, timeout=timeout, what="an active checkpoint")
    return found


def chat_tool_loop(
    client: Any,
    model: str,
    messages: list[dict[str, Any]],
    turns: int,
    user_text: Callable[[int], str],
    tool_result: Callable[[int], str],
) -> str:
    """An agent's loop over Chat Completions with the openai SDK: each turn a user message, then
    the model's tool call answered with `tool_result(turn)` until it answers in text (at most two
    requests a turn). `messages` grows in place; returns the conversation id of the last answer."""
    conversation = ""
    for turn in range(turns):
        messages.append({"role": "user", "content": user_text(turn)})
        for _ in range(2):
            raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
            conversation = raw.headers["x-conversation-id"]
            answer = raw.parse().choices[0].message
            messages.append(answer.model_dump(exclude_none=True))
            if not answer.tool_calls:
                break
            messages.append({"role": "tool", "tool_call_id": answer.tool_calls[0].id, "content": tool_result(turn)})
    return conversation


def stored_snapshot(p: Any) -> str:
    """Everything the proxy stores, as one string: conversations, branches, events, checkpoints,
    calls (to show that a request stored nothing, or changed nothing stored)."""
    out = []
    for conv in p.admin_json("conversations", params={"limit": 1000})["data"]:
        branches = p.conversation(conv["id"])["branches"]
        events = [p.events(conv["id"], branch=b["id"]) for b in branches]
        checkpoints = p.admin_json(f"conversations/{conv['id']}/checkpoints")["data"]
        out.append(json.dumps([conv, branches, events, checkpoints, p.calls(conv["id"])], sort_keys=True))
    return "\n".join(out)


SCRIPTED_TIMEOUTS = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
"""A route's deadlines against a scripted upstream on 127.0.0.1."""


def scripted_route(name: str, model: str, path: str, base_url: str, policy: str = "default") -> dict[str, Any]:
    """A route to a scripted upstream: requests for `model` (a glob) on `path`, the upstream key
    from `UPSTREAM_KEY`, `policy` by name."""
    return {
        "name": name,
        "match": {"model": model, "path": path},
        "upstream": {"base_url": base_url, "api_key_env": "UPSTREAM_KEY", "timeouts": SCRIPTED_TIMEOUTS},
        "policy": policy,
    }


def anthropic_reply(client: Any, streamed: bool, **args: Any) -> tuple[Any, str]:
    """One Messages call with the anthropic SDK, streamed or not: the final message and the
    conversation id ctxproxy answered with."""
    if streamed:
        with client.messages.stream(**args) as stream:
            return stream.get_final_message(), stream.response.headers["x-conversation-id"]
    raw = client.messages.with_raw_response.create(**args)
    return raw.parse(), raw.headers["x-conversation-id"]

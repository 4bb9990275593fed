"""Gemini's `:countTokens` answers for the projection: the real `google-genai` SDK -> the real
proxy -> the scripted Gemini upstream (tests/support/gemini_upstream.py), which counts its own
way (cl100k with its own framing, 8% more) and refuses a bad body as the API does.

A conversation far over a small window is counted as ctxproxy would send it (its summary and
raw tail): within the window, far below the upstream's count of the whole history, and within
3% of what the upstream then bills for the same body sent as a model call. A fresh
conversation is counted by the upstream as it goes, with the route's key. As with Anthropic's
`count_tokens`, a count stores, forks, compacts and records nothing; a bad body is Gemini's 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.agents.harness import wait_idle
from tests.support.e2e import scripted_route, stored_snapshot
from tests.support.gemini_rules import GEMINI_COUNTING, estimate_tokens
from tests.support.gemini_upstream import GeminiUpstream, Reply
from tests.support.proxy_process import UPSTREAM_KEY

pytestmark = pytest.mark.slow

MODEL = "gemini-2.5-count"
WINDOW = 6000
OUTPUT = 800
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": OUTPUT,
    "keep_recent_tokens": 1200,
    "summary_chunk_tokens": 1500,
    "overflow_wait": 20,
    "summarizer": {"timeout": 10, "max_attempts": 2},
}
SUMMARY = (
    "## Goal\nAudit the inventory notes.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\n"
    "none\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nRead the next batch."
)
SYSTEM = "You are a careful auditor. Read every batch of notes you are given."
QUESTION = "How many tokens is this question, roughly?"


def _responder(body: dict[str, Any]) -> Reply:
    system = json.dumps(body.get("systemInstruction") or {})
    return Reply(text=SUMMARY) if "You compress the history" in system else Reply(text="Noted; next batch, please.")


@pytest.fixture(scope="module")
def gemini_server() -> Iterator[GeminiUpstream]:
    server = GeminiUpstream(api_key=UPSTREAM_KEY)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def gup(gemini_server: GeminiUpstream) -> Iterator[GeminiUpstream]:
    gemini_server.clear()
    gemini_server.responder = _responder
    yield gemini_server
    gemini_server.clear()


def _start(proxy: Any, server: GeminiUpstream, policy: dict[str, Any] | None = None) -> Any:
    route = scripted_route("gemini", "gemini-*", "/v1beta/models", server.url, policy="count")
    return proxy(fresh=True, routes=[route], policies={"count": policy or {"context_window": 200000}})


def _client(p: Any, api_key: str) -> genai.Client:
    options = types.HttpOptions(base_url=p.url, api_version="v1beta", timeout=60_000)
    return genai.Client(api_key=api_key, http_options=options)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def _history(batches: int) -> list[Any]:
    """Batches of ~450 tokens of notes, each acknowledged by the model."""
    contents: list[Any] = [_user("Audit every batch of inventory notes, one at a time.")]
    for i in range(batches):
        rows = "".join(
            f"batch {i} row {r:03d}: item {r * 7 + i}, quantity {r % 13}, shelf {r % 5}\n" for r in range(30)
        )
        contents += [{"role": "model", "parts": [{"text": f"Ready for batch {i}."}]}, _user(rows)]
    return contents


def _counts(server: GeminiUpstream) -> list[Any]:
    return [r for r in server.requests if r.path.endswith(":countTokens")]


def _upstream_count(server: GeminiUpstream, body: dict[str, Any]) -> int:
    """The upstream's own count of `body`, asked directly (not through the proxy)."""
    r = httpx.post(
        f"{server.url}/v1beta/models/{MODEL}:countTokens",
        headers={"x-goog-api-key": UPSTREAM_KEY},
        json=body,
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return int(r.json()["totalTokens"])


def test_count_tokens_is_the_projection(proxy: Any, gup: GeminiUpstream, api_key: str) -> None:
    p = _start(proxy, gup, POLICY)
    c = _client(p, api_key)
    config = types.GenerateContentConfig(max_output_tokens=OUTPUT)  # the SDK counts contents only
    history = _history(24)
    # nothing stored yet: no bill covers it, so the upstream counts the trimmed projection
    first = c.models.count_tokens(model=MODEL, contents=history)
    (sent,) = _counts(gup)
    inner = sent.body["generateContentRequest"]
    assert inner["model"] == f"models/{MODEL}" and len(inner["contents"]) < len(history)
    assert first.total_tokens == _upstream_count(gup, sent.body) <= WINDOW - OUTPUT
    assert first.sdk_http_response is not None
    assert (first.sdk_http_response.headers or {})["x-ctxproxy-count"] == "upstream"
    assert p.admin_json("conversations")["data"] == [] and gup.model_requests == []
    answer = c.models.generate_content(model=MODEL, contents=history, config=config)
    history.append({"role": "model", "parts": [{"text": answer.text}]})
    wait_idle(p)
    whole = _upstream_count(gup, {"contents": history})
    assert whole > 2 * WINDOW, whole

    rows: list[tuple[str, int, int]] = []
    for step in range(3):
        history.append(_user(f"Batch {step} of the day is done; a note: shelf {step} is full. Continue."))
        before, asked = stored_snapshot(p), len(_counts(gup))
        counted = c.models.count_tokens(model=MODEL, contents=history)
        assert stored_snapshot(p) == before, "countTokens changed the stored history"
        assert counted.total_tokens is not None and counted.sdk_http_response is not None
        source = (counted.sdk_http_response.headers or {})["x-ctxproxy-count"]
        for sent in _counts(gup)[asked:]:  # the projection, as a whole model call, with the route's key
            inner = sent.body["generateContentRequest"]
            assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY and api_key not in json.dumps(sent.headers)
            assert inner["model"] == f"models/{MODEL}" and len(inner["contents"]) < len(history)
        billed = c.models.generate_content(model=MODEL, contents=history, config=config)
        assert billed.usage_metadata is not None and billed.usage_metadata.prompt_token_count is not None
        rows.append((source, counted.total_tokens, billed.usage_metadata.prompt_token_count))
        history.append({"role": "model", "parts": [{"text": billed.text}]})
        wait_idle(p)
    print(f"[countTokens] whole history {whole}; (source, count, billed): {rows}")
    for _source, tokens, billed_tokens in rows:
        assert tokens <= WINDOW - OUTPUT < whole, rows
        assert abs(tokens - billed_tokens) <= 0.03 * billed_tokens, rows


def test_a_fresh_conversation_is_counted_as_it_goes(proxy: Any, gup: GeminiUpstream, api_key: str) -> None:
    """Nothing stored: the upstream counts the body as the client sent it, with the route's key;
    a `generateContentRequest` (system instruction and tools included) with the key in the query
    goes as the model call would (with the proxy's own tools). Nothing is stored or recorded."""
    p = _start(proxy, gup)
    c = _client(p, api_key)
    counted = c.models.count_tokens(model=MODEL, contents=QUESTION)
    (sent,) = _counts(gup)
    assert sent.path == f"/v1beta/models/{MODEL}:countTokens" and sent.query == ""
    assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY and api_key not in json.dumps(sent.headers)
    assert sent.body == {"contents": [_user(QUESTION)]}
    assert counted.total_tokens == GEMINI_COUNTING.scaled(estimate_tokens(sent.body), GEMINI_COUNTING.scale)
    assert counted.sdk_http_response is not None
    assert (counted.sdk_http_response.headers or {})["x-ctxproxy-count"] == "upstream"

    request = {
        "model": f"models/{MODEL}",
        "contents": [_user(QUESTION)],
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "description": "Run a shell command."}]}],
    }
    r = httpx.post(
        f"{p.url}/v1/models/{MODEL}:countTokens",
        params={"key": api_key},
        json={"generateContentRequest": request},
        timeout=30,
    )
    assert r.status_code == 200 and r.headers["x-ctxproxy-count"] == "upstream", r.text
    sent = _counts(gup)[1]
    inner = sent.body["generateContentRequest"]
    assert {key: inner[key] for key in request if key != "tools"} == {k: v for k, v in request.items() if k != "tools"}
    # the model call would carry the proxy's recall tool after the client's: it counts
    assert inner["tools"][:1] == request["tools"]
    assert [tool["functionDeclarations"][0]["name"] for tool in inner["tools"][1:]] == ["ctxproxy_recall"]
    assert r.json() == {"totalTokens": _upstream_count(gup, sent.body)}
    assert sent.query == "" and sent.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert api_key not in json.dumps(sent.headers) + json.dumps(sent.body)
    assert gup.model_requests == [] and p.admin_json("conversations")["data"] == []


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"contents": []}, "contents is not specified"),
        ({"generateContentRequest": 5}, "GenerateContentRequest object is expected"),
        ({"generateContentRequest": {"model": f"models/{MODEL}"}}, "contents is not specified"),
        ({"contents": [{"role": "user", "parts": []}]}, "contents.parts must not be empty"),
        ([1, 2], "Invalid JSON payload received"),
        (b"{not json", "Invalid JSON payload received"),
    ],
)
def test_a_bad_body_is_geminis_400(proxy: Any, gup: GeminiUpstream, api_key: str, body: Any, words: str) -> None:
    p = _start(proxy, gup)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(
        f"{p.url}/v1beta/models/{MODEL}:countTokens",
        content=content,
        headers={"x-goog-api-key": api_key, "content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT" and words in error["message"], error
    assert gup.requests == [] and p.admin_json("conversations")["data"] == []


def test_the_sdk_raises_geminis_error(proxy: Any, gup: GeminiUpstream, api_key: str) -> None:
    p = _start(proxy, gup)
    c = _client(p, api_key)
    system_turn = types.Content(role="system", parts=[types.Part(text="x")])
    with pytest.raises(genai_errors.ClientError) as caught:
        c.models.count_tokens(model=MODEL, contents=[system_turn])
    assert caught.value.code == 400 and caught.value.status == "INVALID_ARGUMENT"
    assert "Please use a valid role: user, model." in str(caught.value.message)
    assert gup.requests == []

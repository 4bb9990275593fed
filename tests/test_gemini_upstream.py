"""Self-tests of the scripted Gemini upstream through the real `google-genai` SDK: it answers and
refuses like the Gemini API, so the e2e tests that rely on it prove something."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import types

from tests.support.gemini_rules import GEMINI_COUNTING, SKIP_SIGNATURE, estimate_tokens, sign
from tests.support.gemini_upstream import GeminiUpstream, Reply

KEY = "gk-self-test"


@pytest.fixture(scope="module")
def server() -> Iterator[GeminiUpstream]:
    with GeminiUpstream(api_key=KEY, context_windows={"gemini-tiny": 50}) as s:
        yield s


@pytest.fixture
def up(server: GeminiUpstream) -> Iterator[GeminiUpstream]:
    server.clear()
    yield server
    server.clear()


def post(up: GeminiUpstream, model: str, body: Any, key: str | None = KEY, query: str = "") -> httpx.Response:
    headers = {"x-goog-api-key": key} if key else {}
    url = f"{up.url}/v1beta/models/{model}:generateContent{query}"
    return httpx.post(url, json=body, headers=headers, timeout=10)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def test_the_sdk_reads_answers_streams_and_usage(up):
    client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=up.url, api_version="v1beta"))
    up.push(Reply(text="hello", thought="hm"))
    answer = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    usage = answer.usage_metadata
    assert answer.text == "hello" and usage.thoughts_token_count > 0
    assert (
        usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count + usage.thoughts_token_count
    )
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="again"))
    assert "".join(c.text for c in chunks) == "ok: again" and chunks[-1].candidates[0].finish_reason == "STOP"
    assert up.requests[-1].query == "alt=sse"
    counted = client.models.count_tokens(model="gemini-2.5-flash", contents="count me")
    assert counted.total_tokens == GEMINI_COUNTING.scaled(estimate_tokens({"contents": [user("count me")]}), 1.08)


def test_it_counts_its_own_way_and_caches_a_repeated_prefix(up):
    long = " ".join(f"word{i}" for i in range(1500))
    body = {"contents": [user(long)], "systemInstruction": {"parts": [{"text": "be brief"}]}}
    first = post(up, "gemini-2.5-flash", body).json()["usageMetadata"]
    second = post(
        up,
        "gemini-2.5-flash",
        {**body, "contents": [user(long), {"role": "model", "parts": [{"text": "ok"}]}, user("more")]},
    ).json()["usageMetadata"]
    assert "cachedContentTokenCount" not in first and 0 < second["cachedContentTokenCount"] < second["promptTokenCount"]


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        ([], "contents is not specified"),
        ([{"role": "assistant", "parts": [{"text": "x"}]}], "Please use a valid role: user, model."),
        ([{"role": "user", "parts": [{"txt": "x"}]}], 'Unknown name "txt"'),
        (
            [user("go"), {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}, user("no answer")],
            "number of function response parts is equal to the number of function call parts",
        ),
        (
            [user("go"), {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}],
            "function response turn comes immediately after a function call turn",
        ),
        (
            [
                user("go"),
                {"role": "model", "parts": [{"text": "a"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "f"}}]},
            ],
            "function call turn comes immediately after a user turn or after a function response turn",
        ),
    ],
)
def test_it_refuses_like_the_api(up, contents, message):
    r = post(up, "gemini-2.5-flash", {"contents": contents})
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert message in r.json()["error"]["message"]


def _call_turn(signature: str | None) -> list[dict[str, Any]]:
    part: dict[str, Any] = {"functionCall": {"name": "f", "args": {"a": 1}}}
    if signature is not None:
        part["thoughtSignature"] = signature
    return [
        user("go"),
        {"role": "model", "parts": [part]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"x": 1}}}]},
    ]


def test_thought_signatures_must_come_back_unmodified(up):
    good = sign({"functionCall": {"name": "f", "args": {"a": 1}}})
    assert post(up, "gemini-3-flash", {"contents": _call_turn(good)}).status_code == 200
    assert (
        post(up, "gemini-3-flash", {"contents": _call_turn(good.replace("+", "-").replace("/", "_"))}).status_code
        == 200
    )
    assert post(up, "gemini-3-flash", {"contents": _call_turn(SKIP_SIGNATURE)}).status_code == 200
    forged = post(up, "gemini-3-flash", {"contents": _call_turn(sign({"text": "other"}))})
    assert forged.status_code == 400 and "Corrupted thought signature" in forged.json()["error"]["message"]
    missing = post(up, "gemini-3-flash", {"contents": _call_turn(None)})
    assert missing.status_code == 400 and "missing a thought_signature" in missing.json()["error"]["message"]
    assert post(up, "gemini-2.5-flash", {"contents": _call_turn(None)}).status_code == 200  # only Gemini 3 insists


def test_the_window_is_refused_with_the_real_message(up):
    r = post(up, "gemini-tiny", {"contents": [user("word " * 100)]})
    error = r.json()["error"]
    assert r.status_code == 400 and error["status"] == "INVALID_ARGUMENT"
    assert (
        error["message"].startswith("The input token count (")
        and "exceeds the maximum number of tokens allowed (50)." in error["message"]
    )
    assert len(up.overflows) == 1


def test_keys_in_the_header_or_the_query(up):
    assert post(up, "gemini-2.5-flash", {"contents": [user("x")]}, key=None, query=f"?key={KEY}").status_code == 200
    wrong = post(up, "gemini-2.5-flash", {"contents": [user("x")]}, key="nope")
    assert (
        wrong.status_code == 400
        and wrong.json()["error"]["message"] == "API key not valid. Please pass a valid API key."
    )
    none = post(up, "gemini-2.5-flash", {"contents": [user("x")]}, key=None)
    assert none.status_code == 403 and none.json()["error"]["status"] == "PERMISSION_DENIED"
    assert json.loads(httpx.get(f"{up.url}/v1beta/models", headers={"x-goog-api-key": KEY}).text)["models"]

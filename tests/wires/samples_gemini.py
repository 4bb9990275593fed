"""Samples of the Gemini API (`generateContent`) for the wire contract suite."""

from __future__ import annotations

import json

from proxy.usage import Usage
from tests.wires.samples import RECALL, TEXT, Samples

REQUEST = b"""{
  "systemInstruction": {"parts": [{"text": "You are terse."}]},
  "contents": [
    {"role": "user", "parts": [{"text": "List the files."}]},
    {"role": "model", "parts": [{"text": "Listing."}, {"functionCall": {"name": "bash", "args": {"cmd": "ls"}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {"output": "a.txt\\nb.txt"}}}]},
    {"role": "user", "parts": [{"text": "Which port does it listen on?"}]}
  ],
  "tools": [{"functionDeclarations": [{"name": "bash", "parametersJsonSchema":
    {"type": "object", "properties": {"cmd": {"type": "string"}}}}]}]
}"""
STREAM_REQUEST = REQUEST  # Gemini streams by its path (`:streamGenerateContent?alt=sse`), not its body

CACHED = {"promptTokenCount": 100, "cachedContentTokenCount": 64, "candidatesTokenCount": 20, "totalTokenCount": 120}
PARTS = [{"text": TEXT}, {"functionCall": {"name": RECALL, "args": {"query": "port"}}}]
ANSWER = {
    "candidates": [{"content": {"role": "model", "parts": PARTS}, "finishReason": "STOP", "index": 0}],
    "usageMetadata": CACHED,
    "modelVersion": "gemini-2.5-flash",
}


def _chunk(parts: list[dict], finish: str | None = None) -> bytes:
    candidate: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return b"data: " + json.dumps({"candidates": [candidate], "usageMetadata": CACHED}).encode() + b"\r\n\r\n"


STREAM = _chunk([{"text": "Let me"}]) + _chunk([{"text": " look."}]) + _chunk(PARTS[1:], "STOP")


def _message(parsed: dict) -> str:
    assert set(parsed) == {"error"} and isinstance(parsed["error"]["code"], int)
    return parsed["error"]["message"]


def _stream_message(event: bytes) -> str:
    assert event.startswith(b"data: ")
    return _message(json.loads(event[len(b"data: ") :]))


SAMPLES = Samples(
    request=REQUEST,
    stream_request=STREAM_REQUEST,
    answer=json.dumps(ANSWER).encode(),
    stream=STREAM,
    chat_hop=True,
    usage_cached=CACHED,
    usage_cached_expected=Usage(100, 36, 64, None, 20, 0),
    usage_plain={"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
    usage_plain_expected=Usage(100, 100, 0, None, 20, 0),
    error_message=_message,
    stream_error_message=_stream_message,
    paths={
        False: ("/v1beta/models/gemini-2.5-flash:generateContent", {}),
        True: ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", {"alt": "sse"}),
    },
)

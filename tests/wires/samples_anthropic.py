"""Samples of the Anthropic Messages API for the wire contract suite."""

from __future__ import annotations

import json

from proxy.usage import Usage
from tests.wires.samples import RECALL, TEXT, Samples

REQUEST = b"""{
  "model": "claude-sonnet-4-5",
  "max_tokens": 1024,
  "system": "You are terse.",
  "messages": [
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": [{"type": "text", "text": "Listing."},
      {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt\\nb.txt"},
      {"type": "text", "text": "Which port does it listen on?"}]}
  ],
  "tools": [{"name": "bash", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
}"""
STREAM_REQUEST = REQUEST[:-2] + b',\n  "stream": true\n}'

CACHED = {"input_tokens": 36, "cache_read_input_tokens": 64, "cache_creation_input_tokens": 0, "output_tokens": 20}
ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "text", "text": TEXT},
        {"type": "tool_use", "id": "toolu_9", "name": RECALL, "input": {"query": "port"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": CACHED,
}


def _event(data: dict) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


START_USAGE = {"input_tokens": 36, "cache_read_input_tokens": 64, "cache_creation_input_tokens": 0, "output_tokens": 1}
STREAM = b"".join(
    _event(data)
    for data in (
        {"type": "message_start", "message": {**ANSWER, "content": [], "stop_reason": None, "usage": START_USAGE}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " look."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": RECALL, "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": '},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '"port"}'}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 20},
        },
        {"type": "message_stop"},
    )
)


def _message(parsed: dict) -> str:
    assert parsed["type"] == "error"
    return parsed["error"]["message"]


def _stream_message(event: bytes) -> str:
    data = json.loads(event.split(b"data: ", 1)[1])
    assert data["type"] == "error" and event.startswith(b"event: error\n")
    return data["error"]["message"]


SAMPLES = Samples(
    request=REQUEST,
    stream_request=STREAM_REQUEST,
    answer=json.dumps(ANSWER).encode(),
    stream=STREAM,
    usage_cached=CACHED,
    usage_cached_expected=Usage(100, 36, 64, 0, 20, None),
    usage_plain={"input_tokens": 100, "output_tokens": 20},
    usage_plain_expected=Usage(100, 100, None, None, 20, None),
    error_message=_message,
    stream_error_message=_stream_message,
)

"""Samples of the OpenAI chat-completions API for the wire contract suite."""

from __future__ import annotations

import json

from proxy.usage import Usage
from tests.wires.samples import RECALL, TEXT, Samples

REQUEST = b"""{
  "model": "gpt-4o",
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\\"cmd\\": \\"ls\\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\\nb.txt"},
    {"role": "user", "content": "Which port does it listen on?"}
  ],
  "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object",
    "properties": {"cmd": {"type": "string"}}}}}]
}"""
STREAM_REQUEST = REQUEST[:-2] + b',\n  "stream": true, "stream_options": {"include_usage": true}\n}'

CACHED = {
    "prompt_tokens": 100,
    "completion_tokens": 20,
    "total_tokens": 120,
    "prompt_tokens_details": {"cached_tokens": 64},
}
CALL = {"id": "call_9", "type": "function", "function": {"name": RECALL, "arguments": '{"query": "port"}'}}
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": TEXT, "tool_calls": [CALL]},
            "finish_reason": "tool_calls",
        }
    ],
    "usage": CACHED,
}


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


STREAM = (
    b"".join(
        b"data: " + json.dumps(data).encode() + b"\n\n"
        for data in (
            _chunk({"role": "assistant", "content": "Let me"}),
            _chunk({"content": " look."}),
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_9", "type": "function", "function": {"name": RECALL, "arguments": ""}}
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": "port"}'}}]}),
            _chunk({}, "tool_calls"),
            {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": CACHED},
        )
    )
    + b"data: [DONE]\n\n"
)


def _message(parsed: dict) -> str:
    return parsed["error"]["message"]


def _stream_message(event: bytes) -> str:
    return json.loads(event.split(b"data: ", 1)[1])["error"]["message"]


SAMPLES = Samples(
    request=REQUEST,
    stream_request=STREAM_REQUEST,
    answer=json.dumps(ANSWER).encode(),
    stream=STREAM,
    chat_hop=True,
    usage_cached=CACHED,
    usage_cached_expected=Usage(100, 36, 64, None, 20, None),
    usage_plain={"prompt_tokens": 100, "completion_tokens": 20},
    usage_plain_expected=Usage(100, None, None, None, 20, None),
    error_message=_message,
    stream_error_message=_stream_message,
)

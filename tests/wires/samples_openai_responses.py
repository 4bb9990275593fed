"""Samples of the OpenAI Responses API for the wire contract suite (its compaction endpoint,
`/v1/responses/compact`, is the same wire name: it shares them)."""

from __future__ import annotations

import json

from proxy.usage import Usage
from tests.wires.samples import RECALL, TEXT, Samples

REQUEST = b"""{
  "model": "gpt-5",
  "instructions": "You are terse.",
  "input": [
    {"role": "user", "content": "List the files."},
    {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": "{\\"cmd\\": \\"ls\\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "a.txt\\nb.txt"},
    {"role": "user", "content": "Which port does it listen on?"}
  ],
  "tools": [{"type": "function", "name": "bash", "parameters": {"type": "object",
    "properties": {"cmd": {"type": "string"}}}}]
}"""
STREAM_REQUEST = REQUEST[:-2] + b',\n  "stream": true\n}'

CACHED = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 64},
    "output_tokens": 20,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 120,
}
MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": TEXT, "annotations": []}],
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_9",
    "name": RECALL,
    "arguments": '{"query": "port"}',
    "status": "completed",
}
ANSWER = {"id": "resp_1", "object": "response", "status": "completed", "output": [MESSAGE, CALL], "usage": CACHED}


def _events() -> list[dict]:
    events: list[dict] = [
        {"type": "response.created", "response": {**ANSWER, "status": "in_progress", "output": [], "usage": None}},
        {"type": "response.in_progress", "response": {**ANSWER, "status": "in_progress", "output": [], "usage": None}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**MESSAGE, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "item_id": "msg_1",
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "item_id": "msg_1",
            "content_index": 0,
            "delta": "Let me",
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "item_id": "msg_1",
            "content_index": 0,
            "delta": " look.",
        },
        {"type": "response.output_text.done", "output_index": 0, "item_id": "msg_1", "content_index": 0, "text": TEXT},
        {
            "type": "response.content_part.done",
            "output_index": 0,
            "item_id": "msg_1",
            "content_index": 0,
            "part": MESSAGE["content"][0],
        },
        {"type": "response.output_item.done", "output_index": 0, "item": MESSAGE},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**CALL, "arguments": "", "status": "in_progress"},
        },
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 1,
            "item_id": "fc_1",
            "delta": CALL["arguments"],
        },
        {
            "type": "response.function_call_arguments.done",
            "output_index": 1,
            "item_id": "fc_1",
            "arguments": CALL["arguments"],
        },
        {"type": "response.output_item.done", "output_index": 1, "item": CALL},
        {"type": "response.completed", "response": ANSWER},
    ]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


STREAM = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in _events())


def _message(parsed: dict) -> str:
    return parsed["error"]["message"]


def _stream_message(event: bytes) -> str:
    data = json.loads(event.split(b"data: ", 1)[1])
    assert data["type"] == "error" and event.startswith(b"event: error\n")
    return data["message"]


SAMPLES = Samples(
    request=REQUEST,
    stream_request=STREAM_REQUEST,
    answer=json.dumps(ANSWER).encode(),
    stream=STREAM,
    usage_cached=CACHED,
    usage_cached_expected=Usage(100, 36, 64, None, 20, 0),
    usage_plain={"input_tokens": 100, "output_tokens": 20},
    usage_plain_expected=Usage(100, None, None, None, 20, None),
    error_message=_message,
    stream_error_message=_stream_message,
)

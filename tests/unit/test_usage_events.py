"""Invariant 9 on the stream observers: snapshots replace, duplicates and reordering add nothing."""

from __future__ import annotations

import json

from proxy.protocols.anthropic.stream import MessageStream
from proxy.protocols.anthropic.usage import from_anthropic
from proxy.protocols.openai_chat.stream import StreamAccumulator
from proxy.protocols.openai_chat.usage import from_openai_chat
from proxy.sse import parse_event


def sse(data: dict, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data) + "\n\n").encode()


OPENAI_USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 7,
    "total_tokens": 127,
    "prompt_tokens_details": {"cached_tokens": 100},
}


def test_openai_usage_before_finish_and_duplicated_counts_once() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
        {"choices": [], "usage": OPENAI_USAGE},  # out of order: usage before the finish chunk
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": OPENAI_USAGE},  # duplicated final usage event
    ]
    acc = StreamAccumulator()
    for chunk in chunks:
        acc.feed(chunk)
    usage = from_openai_chat(acc.usage)
    assert (usage.input_total, usage.input_uncached, usage.cache_read, usage.output) == (120, 20, 100, 7)
    assert acc.message(0) == {"role": "assistant", "content": "Hi"} and acc.finish_reason(0) == "stop"


def test_anthropic_message_delta_is_cumulative_and_replaces() -> None:
    stream = MessageStream()
    start = {
        "type": "message_start",
        "message": {
            "id": "m",
            "role": "assistant",
            "content": [],
            "usage": {
                "input_tokens": 50,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 200,
                "output_tokens": 1,
            },
        },
    }
    events = [
        sse(start, "message_start"),
        sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        sse({"type": "content_block_stop", "index": 0}),
        sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 10}}),
        sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}}),
        sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}}),
        sse({"type": "message_stop"}, "message_stop"),
    ]
    for raw in events:
        assert stream(parse_event(raw)) == raw  # relayed unchanged
    usage = from_anthropic(stream.usage_raw())
    # 10 + 30 + 30 would be 70: cumulative snapshots replace instead
    assert usage.output == 30
    assert (usage.input_total, usage.input_uncached, usage.cache_read, usage.cache_write) == (1250, 50, 1000, 200)
    assert stream.done and stream.finish_reason() == "end_turn"


def test_anthropic_compaction_iterations_are_booked_once() -> None:
    """The server-side compaction's iteration is billed but not in the top-level fields (the SDK's
    `BetaIterationsUsage`); the `message` iterations are the top level itself."""
    raw = {
        "input_tokens": 900,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 0,
        "output_tokens": 40,
        "iterations": [
            {
                "type": "compaction",
                "input_tokens": 150_000,
                "output_tokens": 2_000,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 50,
            },
            {
                "type": "message",
                "input_tokens": 900,
                "output_tokens": 40,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 0,
            },
        ],
    }
    usage = from_anthropic(raw)
    assert (usage.input_uncached, usage.cache_read, usage.cache_write, usage.output) == (150_900, 100, 50, 2_040)
    assert usage.input_total == 150_900 + 100 + 50
    assert from_anthropic({**raw, "iterations": None}) == from_anthropic(
        {k: v for k, v in raw.items() if k != "iterations"}
    )
    unknown = from_anthropic({"output_tokens": 3, "iterations": raw["iterations"]})
    assert unknown.input_total is None and unknown.output == 2_003  # unknown input stays unknown


def test_anthropic_streamed_compaction_usage_is_booked_once() -> None:
    stream = MessageStream()
    start = {
        "type": "message_start",
        "message": {"id": "m", "role": "assistant", "content": [], "usage": {"input_tokens": 900, "output_tokens": 1}},
    }
    stream(parse_event(sse(start, "message_start")))
    iterations = [
        {"type": "compaction", "input_tokens": 1_000, "output_tokens": 200},
        {"type": "message", "input_tokens": 900, "output_tokens": 40},
    ]
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "compaction"},
        "usage": {"output_tokens": 40, "iterations": iterations},
    }
    stream(parse_event(sse(delta, "message_delta")))
    usage = from_anthropic(stream.usage_raw())
    assert (usage.input_total, usage.output) == (1_900, 240)

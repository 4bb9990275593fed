"""Every call fits, the summarizer's included (issue 10, part 1).

The scripted upstream rejects any request whose prompt + max_tokens exceeds its model's window,
summary calls included: the summarizer here is the route's own model, with the same window. A
long generated agent session (user turns, parallel tool calls, large results, a client that
sometimes asks for a small `max_tokens`, which leaves a large input budget for the main call but
not for the summarizer) must send nothing over the window.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.test_rewriting import OBJECTIVE, SYSTEM, is_summary_request, summary_requests, wait_checkpoints
from tests.support import transcripts
from tests.support.upstream_server import Reply, UpstreamServer, count_prompt_tokens, count_text_tokens, tool_call

pytestmark = pytest.mark.slow


def summary_text(words: int) -> str:
    """A structured summary of about `words` words of facts (no URLs, no invented quotes)."""
    facts = " ".join(f"fact{i}" for i in range(words))
    return (
        "## Goal\nMigrate the billing service to the new queue.\n## Constraints\nnone\n## Decisions\n"
        f"none\n## Key facts\n{facts}\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\n"
        "Continue the migration."
    )


def summary_limit(body: dict[str, Any]) -> int:
    """The summary size limit the proxy states in a summarizer request."""
    match = re.search(r"under ([\d,]+) tokens", body["messages"][-1]["content"])
    assert match, "the summarizer request states no size limit"
    return int(match.group(1).replace(",", ""))


def over_window(upstream: UpstreamServer, model: str, window: int) -> list[tuple[bool, int, int]]:
    """(is summary, prompt tokens, max_tokens) of every request to `model` that exceeded `window`."""
    out = []
    for request in upstream.chat_requests:
        body = request.body
        if body.get("model") != model:
            continue
        prompt = count_prompt_tokens(body)
        reply = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
        if prompt + reply > window:
            out.append((is_summary_request(body), prompt, reply))
    return out


def run_session(client: Any, model: str, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    for i in range(turns):
        extra = {"max_tokens": 600} if i % 4 == 0 else {}
        response = client.chat.completions.create(model=model, messages=list(messages), **extra)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            for k, call in enumerate(message.tool_calls):
                size = 9_000 if (i + k) % 7 == 0 else 1_200
                content = f"output of {call.function.arguments}\n" + "line of output\n" * (size // 15)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        else:
            messages.append({"role": "user", "content": f"turn {i}: continue with part {i}. " + "detail " * 120})
    return messages


@pytest.mark.parametrize("window", [8_000, 16_000])
def test_long_session_sends_nothing_over_the_window(proxy, upstream, api_key, monkeypatch, window):
    model = f"gpt-fit-{window}"
    monkeypatch.setitem(upstream.context_windows, model, window)
    policy = {"context_window": window, "max_output_tokens": 1000, "overflow_wait": 20, "summarizer": {"timeout": 5}}
    p = proxy(policies={"default": policy})
    turn = {"n": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            # as long as the stated limit allows: the rolling summary grows into the next chunk
            return Reply(content=summary_text(summary_limit(body) // 3))
        turn["n"] += 1
        n = turn["n"]
        if n % 2 == 1:
            calls = [
                tool_call("bash", {"command": f"cat file_{n}_{k}.py"}, id=f"call_{n}_{k}") for k in range(1 + n % 3)
            ]
            return Reply(content=None, tool_calls=calls)
        return Reply(content=f"step {n} done")

    upstream.responder = respond
    run_session(p.client(api_key), model, 120)
    assert over_window(upstream, model, window) == []
    summaries = summary_requests(upstream)
    assert len(summaries) >= 2, "the session never compacted"
    # ctxproxy's own summarizer states its reply's size; a shared request (the default mode's) is
    # the client's own request plus the ask, whose reply the policy's reserve must hold
    largest = max(count_prompt_tokens(b) + int(b.get("max_tokens") or policy["max_output_tokens"]) for b in summaries)
    assert largest <= window


SIZE_POLICY = {"context_window": 8_000, "max_output_tokens": 1000, "overflow_wait": 20, "summarizer": {"timeout": 5}}


def drive_to_compaction(p: Any, upstream: UpstreamServer, api_key: str, model: str) -> str:
    """Send turns until two summarizer requests were made; the conversation id."""
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conv = ""
    for i in range(40):
        messages.append({"role": "user", "content": f"turn {i}: " + "word " * 300})
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
        conv = raw.headers["x-conversation-id"]
        messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        if len(summary_requests(upstream)) >= 2:
            break
    return conv


def long_summary(tokens: int) -> str:
    """A structured summary of at least `tokens` tokens (o200k), one key fact per line."""
    head = "## Goal\nMigrate the billing service to the new queue.\n## Constraints\nnone\n## Key facts\n"
    lines, i = [], 0
    while count_text_tokens(head + "\n".join(lines)) < tokens:
        lines.append(f"- the worker pool {i} drained cleanly after restart {i}")
        i += 1
    return head + "\n".join(lines) + "\n## Next step\nContinue the migration."


def active(checkpoints: list[dict[str, Any]]) -> dict[str, Any]:
    found = [c for c in checkpoints if c["status"] == "active"]
    assert found, checkpoints
    return found[0]


def test_a_summary_a_little_over_its_limit_is_kept_as_written(proxy, upstream, api_key, monkeypatch):
    """Models overshoot length instructions: a summary 20% over `summary_max_tokens` still fits the
    room the plan left; it is committed as written, not asked for again, not thrown away."""
    model = "gpt-fit-size-over"
    monkeypatch.setitem(upstream.context_windows, model, 8_000)
    p = proxy(policies={"default": SIZE_POLICY})
    written: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            written.append(long_summary(int(summary_limit(body) * 1.2)))
            return Reply(content=written[-1])
        return Reply(content="ok")

    upstream.responder = respond
    conv = drive_to_compaction(p, upstream, api_key, model)
    checkpoint = active(wait_checkpoints(p, conv))
    assert checkpoint["summary"] in written  # as written
    assert all("A previous attempt was" not in b["messages"][-1]["content"] for b in summary_requests(upstream))


def test_a_summary_far_over_its_room_is_cut_at_a_line_never_dropped(proxy, upstream, api_key, monkeypatch):
    model = "gpt-fit-size-cut"
    monkeypatch.setitem(upstream.context_windows, model, 8_000)
    p = proxy(policies={"default": SIZE_POLICY})
    written: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            written.append(long_summary(summary_limit(body) * 3))
            return Reply(content=written[-1])
        return Reply(content="ok")

    upstream.responder = respond
    conv = drive_to_compaction(p, upstream, api_key, model)
    summary = active(wait_checkpoints(p, conv))["summary"]
    assert summary not in written and summary.startswith("## Goal\nMigrate the billing service")
    kept, marker = summary.rsplit("\n", 1)
    assert marker.startswith("[summary cut to its length limit: ") and marker.endswith(" more lines left out]")
    assert any(w.startswith(kept + "\n") for w in written)  # cut at a line boundary
    assert count_text_tokens(summary) < count_text_tokens(written[0])


def test_an_impossible_user_message_is_a_400_naming_the_window_and_the_conversation(proxy, upstream, api_key):
    """The newest user message alone exceeds the window: a 400 `context_length_exceeded` in
    OpenAI's shape, naming the configured window. The request founded its conversation and is
    retracted with it, so the answer names no conversation (there is none to open)."""
    import openai

    model = "gpt-fit-impossible"
    p = proxy(policies={"default": {"context_window": 8_000, "max_output_tokens": 1000}})
    client = p.client(api_key)
    huge = {"role": "user", "content": "word " * 12_000}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=[SYSTEM, OBJECTIVE, huge])
    error = caught.value
    assert error.code == "context_length_exceeded"
    assert "maximum context length is 8000 tokens" in error.message
    assert error.response.headers.get("x-conversation-id") is None
    assert not [r for r in upstream.chat_requests if r.body.get("model") == model]


@pytest.mark.parametrize("window", [8_000, 16_000])
def test_a_long_replayed_transcript_sends_nothing_over_the_window(proxy, upstream, api_key, monkeypatch, window):
    """A long real-agent run (the longest shared one, else one built from the vendored runs),
    replayed through the proxy: the upstream answers with the run's own assistant turns, the
    summarizer is the route's model with the same window, and no request of this model, summary
    calls included, exceeds it."""
    data = transcripts.load(transcripts.long_run())
    model = f"gpt-fit-replay-{window}"
    monkeypatch.setitem(upstream.context_windows, model, window)
    policy = {"context_window": window, "max_output_tokens": 1000, "overflow_wait": 20, "summarizer": {"timeout": 5}}
    p = proxy(policies={"default": policy})
    history = data["messages"]
    script = [m for m in history if m["role"] == "assistant"]
    position = {"i": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(content=summary_text(summary_limit(body) // 3))
        message = script[position["i"]]
        position["i"] += 1
        return Reply(content=message.get("content") or None, tool_calls=message.get("tool_calls"), completion_tokens=5)

    upstream.responder = respond
    client = p.client(api_key)
    kwargs = {"tools": data["tools"]} if data.get("tools") else {}
    for index, message in enumerate(history):
        if message["role"] == "assistant" and index > 0:
            response = client.chat.completions.create(model=model, messages=history[:index], **kwargs)
            assert (response.choices[0].message.content or None) == (message.get("content") or None)
    assert over_window(upstream, model, window) == []
    assert summary_requests(upstream, model), "the run never compacted"


HUGE_TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}
]


def huge_log(tokens: int) -> str:
    """About `tokens` tokens of distinct log lines (first and last lines recognisable)."""
    lines = [f"FIRST LINE of the build log, {tokens} tokens follow"]
    lines += [f"{i:06d} compile unit {i} ok, warnings {i % 7}" for i in range(tokens // 12)]
    return "\n".join([*lines, "LAST LINE: 3 tests failed"])


def test_a_60k_token_tool_result_in_the_newest_turn_is_cut_and_served(proxy, upstream, api_key, monkeypatch):
    model = "gpt-fit-huge-result"
    window = 16_000
    monkeypatch.setitem(upstream.context_windows, model, window)
    policy = {"context_window": window, "max_output_tokens": 1000, "recall": {"enabled": "auto"}}
    p = proxy(policies={"default": policy})
    client = p.client(api_key)
    call = tool_call("bash", {"command": "cat build.log"}, id="call_huge")

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(content=summary_text(summary_limit(body) // 3))
        if body["messages"][-1]["role"] == "tool":
            return Reply(content="The build log ends with 3 failed tests.")
        return Reply(content=None, tool_calls=[call])

    upstream.responder = respond
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, tools=HUGE_TOOLS)
    conv = raw.headers["x-conversation-id"]
    messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
    log = huge_log(60_000)
    messages.append({"role": "tool", "tool_call_id": "call_huge", "content": log})
    assert count_prompt_tokens({"messages": messages}) > 55_000

    answer = client.chat.completions.create(model=model, messages=messages, tools=HUGE_TOOLS)
    assert answer.choices[0].message.content == "The build log ends with 3 failed tests."

    sent = [r.body for r in upstream.chat_requests if r.body.get("model") == model and not is_summary_request(r.body)][
        -1
    ]
    assert count_prompt_tokens(sent) + 1000 <= window
    assert over_window(upstream, model, window) == []
    result = sent["messages"][-1]
    assert result["tool_call_id"] == "call_huge" and sent["messages"][-2]["tool_calls"][0]["id"] == "call_huge"
    events = p.events(conv)
    stored = next(e for e in events if e["role"] == "tool")
    marker = re.search(r"\[trimmed to fit the context window: [^\]]*\]", result["content"])
    assert marker, result["content"][:300]
    assert f"; event {stored['seq']}; ctxproxy_recall can fetch it]" in marker.group(0)
    assert re.search(rf"tool result of bash, [\d,]+ tokens \({len(log):,} chars\)", marker.group(0))
    head, tail = result["content"][: marker.start()].rstrip("\n"), result["content"][marker.end() :].lstrip("\n")
    assert log.startswith(head) and log.endswith(tail) and head.startswith("FIRST LINE") and tail.endswith("failed")
    assert stored["message"]["content"] == log  # the stored event keeps it whole, byte for byte

    def cut(call: dict[str, Any]) -> bool:
        return bool((call.get("projection") or {}).get("cut_to_fit"))

    records = p.wait_calls(conv, 2, until=lambda calls: any(cut(c) for c in calls))
    assert next(c for c in records if cut(c))["projection"]["cut_to_fit"] == [stored["seq"]]

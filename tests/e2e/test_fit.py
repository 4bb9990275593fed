"""Every call fits, the summarizer's included (issue 10, part 1).

The scripted upstream rejects any request whose prompt + max_tokens exceeds its model's window,
summary calls included: the summarizer here is the route's own model, with the same window. A
long generated agent session (user turns, parallel tool calls, large results, a client that
sometimes asks for a small `max_tokens`, which leaves a large input budget for the main call but
not for the summarizer) must send nothing over the window.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_rewriting import OBJECTIVE, SYSTEM, is_summary_request, summary_requests
from tests.support.upstream_server import Reply, UpstreamServer, count_prompt_tokens, tool_call


def summary_text(words: int) -> str:
    """A structured summary of about `words` words of facts (no URLs, no invented quotes)."""
    facts = " ".join(f"fact{i}" for i in range(words))
    return (
        "## Goal\nMigrate the billing service to the new queue.\n## Constraints\nnone\n## Decisions\n"
        f"none\n## Key facts\n{facts}\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\n"
        "Continue the migration."
    )


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
            # as long as the reply reserve allows: the rolling summary grows into the next chunk
            return Reply(content=summary_text(int(body["max_tokens"]) // 3))
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
    largest = max(count_prompt_tokens(b) + int(b["max_tokens"]) for b in summaries)
    assert largest <= window

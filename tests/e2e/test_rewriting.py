"""Context rewriting end to end: long agent sessions through the real proxy to an upstream that,
like the real API, rejects any request over its window or with a broken tool pairing.

The scripted upstream answers summarizer requests (recognised by the summarizer's instructions)
with a short structured summary, and agent requests from a script or a real transcript.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

from proxy.identify import canonical
from tests.support import transcripts
from tests.support.e2e import asks_shared_summary
from tests.support.upstream_server import Reply, UpstreamServer, tool_call
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

WINDOW = 6000
SMALL_POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 500,
    "keep_recent_tokens": 1500,
    "summary_chunk_tokens": 2000,
    "late_trim": 0.8,  # trimmed and compacted from the trigger on (by default: once a request would not fit)
    "overflow_wait": 20,
    "summarizer": {"timeout": 5, "max_attempts": 2},
}
SYSTEM = {"role": "system", "content": "You are a careful coding agent. Do not overwrite prod config."}
OBJECTIVE = {
    "role": "user",
    "content": "Objective: migrate the billing service to the new queue. Constraint: never touch config/prod.yaml.",
}


def is_own_summary_request(body: dict[str, Any]) -> bool:
    """A request of ctxproxy's own summarizer (its system prompt)."""
    messages = body.get("messages") or []
    return bool(messages) and str(messages[0].get("content", "")).startswith("You compress the history")


def is_summary_request(body: dict[str, Any]) -> bool:
    """A summarizer request: ctxproxy's own, or a shared one (its ask last: the default
    `summarizer.mode: auto` asks the conversation's own request first)."""
    return is_own_summary_request(body) or asks_shared_summary(body)


SUMMARY = (
    "## Goal\nMigrate the billing service to the new queue.\n## Constraints\nnone\n## Decisions\n"
    "none\n## Key facts\nnone\n## Failed attempts\nnone\n## Open questions\nnone\n## Next step\n"
    "Continue the migration."
)


def wait_checkpoints(p: Any, conv: str, timeout: float = 10) -> list[dict[str, Any]]:
    """Compaction runs in the background: poll until its outcome is stored."""
    checkpoints: list[dict[str, Any]] = wait_until(
        lambda: p.admin_json(f"conversations/{conv}/checkpoints")["data"],
        timeout=timeout,
        interval=0.1,
        what=f"a checkpoint of {conv}",
    )
    return checkpoints


def drive(
    client: Any, model: str, messages: list[dict[str, Any]], turns: int, words: int = 150, after: Any = None
) -> str:
    """Send `turns` user turns of filler text, appending each answer as the SDK returned it;
    `after(i)` runs after each turn and may return True to stop early. The conversation id."""
    conv = ""
    for i in range(turns):
        messages.append({"role": "user", "content": f"turn {i}: " + "word " * words})
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
        conv = raw.headers["x-conversation-id"]
        messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        if after is not None and after(i):
            break
    return conv


def agent_requests(upstream: UpstreamServer, model: str) -> list[dict[str, Any]]:
    return [r.body for r in upstream.chat_requests if r.body.get("model") == model and not is_summary_request(r.body)]


def summary_requests(upstream: UpstreamServer, model: str | None = None) -> list[dict[str, Any]]:
    """The summarizer requests the shared upstream received (of `model`'s conversations only: a
    proxy of an earlier test may still be finishing a background compaction of its own)."""
    return [
        r.body
        for r in upstream.chat_requests
        if is_summary_request(r.body) and (model is None or r.body.get("model") == model)
    ]


def assert_protocol_and_pins(sent: dict[str, Any], client_messages: list[dict[str, Any]]) -> None:
    messages = sent["messages"]
    assert messages[0] == client_messages[0], "system prompt not first or not verbatim"
    last_user = next(m for m in reversed(client_messages) if m["role"] == "user")
    assert last_user in messages, "latest user message not sent verbatim"
    assert client_messages[1] in messages, "the objective (first user message) was not kept verbatim"
    # no orphan tool messages (the upstream would have refused, but say it plainly)
    open_ids: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            open_ids = {c["id"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"orphan tool result {m['tool_call_id']}"


def test_generated_300_turn_session_never_overflows(proxy, upstream, api_key, monkeypatch):
    """300+ turns with parallel tool calls and huge results at a 6k window: zero rejections."""
    model = "gpt-rewrite-generated"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    p = proxy(policies={"default": SMALL_POLICY})
    turn = {"n": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(content=SUMMARY)
        turn["n"] += 1
        n = turn["n"]
        if n % 3 == 1:  # parallel tool calls
            return Reply(
                content=None,
                tool_calls=[
                    tool_call("bash", {"command": f"cat file_{n}_{k}.py"}, id=f"call_{n}_{k}") for k in range(1 + n % 4)
                ],
            )
        return Reply(content=f"step {n} done")

    upstream.responder = respond
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    for i in range(320):
        request_messages = list(messages)
        response = client.chat.completions.create(model=model, messages=request_messages)
        assert_protocol_and_pins(agent_requests(upstream, model)[-1], request_messages)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            for k, call in enumerate(message.tool_calls):
                size = 30_000 if (i + k) % 11 == 0 else 600
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": f"output of {call.function.arguments}\n" + "x" * size,
                    }
                )
        else:
            messages.append({"role": "user", "content": f"turn {i}: continue with the next part"})

    sent = agent_requests(upstream, model)
    assert len(sent) == 320
    conv = client.chat.completions.with_raw_response.create(model=model, messages=messages).headers["x-conversation-id"]
    checkpoints = p.admin_json(f"conversations/{conv}/checkpoints")["data"]
    active = [c for c in checkpoints if c["status"] == "active"]
    assert len(active) == 1 and active[0]["generation"] >= 2, checkpoints
    assert len(summary_requests(upstream, model)) >= 2
    # the summary is injected as quoted user-role data, never as system text
    last = agent_requests(upstream, model)[-1]["messages"]
    blocks = [m for m in last if "<conversation_summary" in str(m.get("content"))]
    assert len(blocks) == 1 and blocks[0]["role"] == "user"
    assert all("<conversation_summary" not in str(m.get("content")) for m in last if m["role"] == "system")
    # what was sent is a fraction of what the client sent
    calls = p.admin_json(f"conversations/{conv}/calls", params={"limit": 1000})["data"]
    main = [c for c in calls if c["purpose"] == "main" and c["projection"]]
    # ... and each fit the window with its reply by the upstream's own count (ctxproxy's estimate,
    # calibrated to that count, may read a few tokens over it while the upstream's stays under)
    assert main and max(c["usage"]["input_total"] for c in main) <= WINDOW - 500
    assert all(c["projection"]["predicted_tokens"] <= c["projection"]["limit_tokens"] for c in main)
    summaries = [c for c in calls if c["purpose"] == "summary"]
    assert summaries and all(c["usage"]["input_total"] for c in summaries)


@pytest.mark.parametrize(
    "name,window",
    [
        (transcripts.long_run(), 16000),  # the longest shared run, else a long one built from vendored ones
        ("tau-bench__gpt-4o-airline__task33__trial0.json", 7000),
    ],
)
def test_real_transcript_through_the_proxy(proxy, upstream, api_key, monkeypatch, name, window):
    """A real agent transcript replayed through the proxy: the upstream answers with the
    transcript's own assistant turns and rejects anything over its window or mis-paired."""
    data = transcripts.load(name)
    model = f"gpt-rewrite-{window}"
    monkeypatch.setitem(upstream.context_windows, model, window)
    policy = {
        "context_window": window,
        "max_output_tokens": 1000,
        "keep_recent_tokens": window // 4,
        "summary_chunk_tokens": max(2000, window // 2),
        "overflow_wait": 20,
    }
    p = proxy(policies={"default": policy})
    script = [m for m in data["messages"] if m["role"] == "assistant"]
    position = {"i": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(content=SUMMARY)
        message = script[position["i"]]
        position["i"] += 1
        return Reply(content=message.get("content") or None, tool_calls=message.get("tool_calls"), completion_tokens=5)

    upstream.responder = respond
    client = p.client(api_key)
    history = data["messages"]
    requests = 0
    for index, message in enumerate(history):
        if message["role"] != "assistant" or index == 0:
            continue
        client_messages = history[:index]
        kwargs = {"tools": data["tools"]} if data.get("tools") else {}
        response = client.chat.completions.create(model=model, messages=client_messages, **kwargs)
        requests += 1
        got = response.choices[0].message
        assert (got.content or None) == (message.get("content") or None)
        sent = agent_requests(upstream, model)[-1]
        assert sent["messages"][0] == history[0]
        assert history[index - 1] in sent["messages"] or history[index - 1]["role"] == "tool"
    assert requests == len(script) - (1 if history[0]["role"] == "assistant" else 0)
    sizes = [r.get("messages") for r in agent_requests(upstream, model)]
    assert len(sizes) == requests


def test_summary_failure_keeps_serving_and_does_not_loop(proxy, upstream, api_key, monkeypatch):
    model = "gpt-rewrite-failing"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    p = proxy(policies={"default": {**SMALL_POLICY, "overflow_wait": 5}})

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(status=500)
        return Reply(content="fine")

    upstream.responder = respond
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    started = time.monotonic()
    conv = drive(
        client,
        model,
        messages,
        40,
        after=lambda i: assert_protocol_and_pins(agent_requests(upstream, model)[-1], messages[:-1]),
    )
    # bounded: each failed job makes one shared call (the default mode's, which fails too) and
    # max_attempts=2 calls of the own summarizer, then backs off 30 s; never one per request
    jobs_possible = 1 + int((time.monotonic() - started) // 30)
    assert 1 <= len(summary_requests(upstream, model)) <= (1 + 2) * jobs_possible
    checkpoints = wait_checkpoints(p, conv)
    assert checkpoints and all(c["status"] == "failed" for c in checkpoints)
    assert len(checkpoints) <= jobs_possible
    assert "500" in checkpoints[0]["error"]
    calls = p.calls(conv)
    errors = [c for c in calls if c["purpose"] == "summary"]
    assert errors and all(c["status"] == "error" for c in errors)
    # history is complete: every client message is stored
    assert len(p.events(conv)) == len(messages) - 1


def test_summarizer_timeout_leaves_previous_state(proxy, upstream, api_key, monkeypatch):
    model = "gpt-rewrite-timeout"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    p = proxy(
        policies={"default": {**SMALL_POLICY, "overflow_wait": 3, "summarizer": {"timeout": 1, "max_attempts": 1}}}
    )

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(content=SUMMARY, delay_before_headers=3)
        return Reply(content="fine")

    upstream.responder = respond
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conv = drive(client, model, messages, 30)
    checkpoints = wait_checkpoints(p, conv)
    assert checkpoints and all(c["status"] == "failed" for c in checkpoints)
    assert "timed out" in checkpoints[0]["error"]
    summary_calls = [c for c in p.calls(conv) if c["purpose"] == "summary"]
    assert summary_calls and all(c["status"] == "error" for c in summary_calls)


def test_delete_during_compaction_stays_deleted(proxy, upstream, api_key, monkeypatch):
    model = "gpt-rewrite-delete"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    # on_overflow prune: requests never wait for the (held) summary
    p = proxy(fresh=True, policies={"default": {**SMALL_POLICY, "on_overflow": "prune"}})
    held: list[Reply] = []

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            reply = Reply(content=SUMMARY, delay_before_headers=2)
            held.append(reply)
            return reply
        return Reply(content="fine")

    upstream.responder = respond
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conv = drive(client, model, messages, 40, after=lambda i: bool(held))
    assert held, "no compaction started"
    assert p.admin(f"conversations/{conv}", method="DELETE").status_code == 200
    assert held[0].done.wait(10), "the summary request never finished"
    time.sleep(1.0)  # the job's late commit and call record would land now
    assert p.admin(f"conversations/{conv}").status_code == 404
    p.stop()
    db = sqlite3.connect(p.db_path)
    for table in ("events", "branches", "calls", "checkpoints"):
        (count,) = db.execute(f"SELECT COUNT(*) FROM {table} WHERE conversation_id = ?", (conv,)).fetchone()
        assert count == 0, f"{table} has rows of the deleted conversation"
    db.close()
    p.start()


def test_projection_endpoint_shows_exactly_what_is_sent(proxy, upstream, api_key, monkeypatch):
    """ "Print what is actually sent each turn": the admin projection equals the next request's
    messages for the stored history, and every call record carries its projection record."""
    model = "gpt-rewrite-inspect"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    p = proxy(policies={"default": SMALL_POLICY})
    upstream.responder = lambda body: Reply(content=SUMMARY) if is_summary_request(body) else None
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conv = drive(client, model, messages, 25, words=120)
    wait_checkpoints(p, conv)
    view = p.admin_json(f"conversations/{conv}/projection")
    assert view["model"] == model and view["route"] == "main"
    assert view["messages"][0] == SYSTEM
    record = view["record"]
    assert record["client_tokens"] > record["sent_tokens"] > 0
    assert record["covered_through_seq"] == view["checkpoint"]["covered_through_seq"] > 0
    # the next real request sends the same messages plus the new turn
    messages.append({"role": "user", "content": "one more"})
    client.chat.completions.create(model=model, messages=messages)
    sent = agent_requests(upstream, model)[-1]["messages"]
    # stored responses are shown as the upstream sent them; the client re-sends them with its own
    # null/absent conventions: equal up to the documented canonicalization
    assert [canonical(m) for m in sent[: len(view["messages"])]] == [canonical(m) for m in view["messages"]]
    assert sent[len(view["messages"]) :] == [messages[-1]]
    calls = p.admin_json(f"conversations/{conv}/calls", params={"limit": 1000})["data"]
    last_main = [c for c in calls if c["purpose"] == "main"][-1]
    assert last_main["projection"]["sent_tokens"] == last_main["usage"]["input_total"]
    assert p.admin(f"conversations/{conv}/projection", token="wrong").status_code == 401
    assert p.admin("conversations/c_missing/projection").status_code == 404


def test_summarizer_through_litellm(proxy, upstream, api_key, monkeypatch):
    """`summarizer.model` routes the summary call through litellm (here an OpenAI-compatible
    server by `openai/NAME` + `base_url`); it is recorded with that model and purpose summary."""
    model = "gpt-rewrite-litellm"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    summarizer = {
        "model": "openai/gpt-summarizer",
        "base_url": upstream.base_url,
        "api_key_env": "UPSTREAM_KEY",
        "timeout": 30,
    }
    p = proxy(policies={"default": {**SMALL_POLICY, "summarizer": summarizer}})
    upstream.responder = lambda body: Reply(content=SUMMARY) if is_summary_request(body) else None
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conv = drive(client, model, messages, 25, words=120)
    checkpoints = wait_checkpoints(p, conv, timeout=30)
    assert checkpoints and checkpoints[0]["status"] in ("active", "superseded"), checkpoints
    assert checkpoints[0]["model"] == "openai/gpt-summarizer"
    summaries = summary_requests(upstream)
    assert summaries and all(body["model"] == "gpt-summarizer" for body in summaries)
    assert all(
        r.headers.get("authorization") == "Bearer sk-upstream-secret-0123456789"
        for r in upstream.chat_requests
        if is_summary_request(r.body)
    )
    calls = [c for c in p.calls(conv) if c["purpose"] == "summary"]
    assert calls and calls[0]["model"] == "openai/gpt-summarizer" and calls[0]["usage"]["input_total"]


def test_a_correction_of_the_pinned_objective_survives_compaction(proxy, upstream, api_key, monkeypatch):
    """The pinned objective says "budget 150"; the next user turn corrects it to 120 and is then
    summarized away. Every later request still carries the objective verbatim (it is pinned) and,
    after it, the summary block saying the budget is now 120 and what it replaces."""
    model = "gpt-rewrite-correction"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    # how ctxproxy's own summarizer is shown the pins (tagged, with event ids): its mode, not the default's
    p = proxy(policies={"default": {**SMALL_POLICY, "summarizer": {**SMALL_POLICY["summarizer"], "mode": "text"}}})
    objective = {"role": "user", "content": "Objective: plan the team offsite. Constraint: budget 150 per person."}
    correction = {"role": "user", "content": "Correction: budget 120 per person, not 150."}
    corrected = (
        '## Goal\nPlan the team offsite.\n## Constraints\n"budget 150 per person" [e1]\n## Corrections\n'
        '- budget: 120 per person (replaces 150 stated in e1; corrected in e3) "budget 120 per person" [e3]\n'
        "## Decisions\nnone\n## Key facts\nbudget 120 per person [e3]\n## Failed attempts\nnone\n"
        "## Open questions\nnone\n## Next step\nBook a venue."
    )
    seen: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            data = str(body["messages"][1]["content"])
            seen.append(data)
            # like a real summarizer: it can only report the correction once it has read it
            return Reply(content=corrected if "budget 120" in data else SUMMARY)
        return Reply(content="noted")

    upstream.responder = respond
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, objective]
    client.chat.completions.create(model=model, messages=messages)
    messages += [{"role": "assistant", "content": "noted"}, correction]
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
    messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
    conv = drive(client, model, messages, 40, words=150)
    assert conv == raw.headers["x-conversation-id"]
    checkpoints = wait_checkpoints(p, conv)
    assert any(c["status"] == "active" and c["covered_through_seq"] >= 3 for c in checkpoints), checkpoints
    # the summarizer saw the pinned objective with its event id
    assert any('<pinned id="e1">\nObjective: plan the team offsite.' in data for data in seen)
    messages.append({"role": "user", "content": "which budget do we plan with?"})
    client.chat.completions.create(model=model, messages=messages)
    sent = agent_requests(upstream, model)[-1]["messages"]
    assert sent[0] == SYSTEM and sent[1] == objective, "the pinned objective is not sent verbatim, second"
    assert correction not in sent, "the correcting turn should be covered by the summary by now"
    block = next(i for i, m in enumerate(sent) if "<conversation_summary" in str(m.get("content")))
    assert block > 1 and sent[block]["role"] == "user"
    assert "- budget: 120 per person (replaces 150 stated in e1; corrected in e3)" in sent[block]["content"]
    assert sent[-1] == messages[-1]


@pytest.mark.parametrize("late_trim", [None, 0.8])
def test_a_conversation_goes_as_sent_while_it_fits(proxy, upstream, api_key, monkeypatch, late_trim):
    """By default (late_trim 1.0) every request that fits the input budget before the first
    summary goes upstream with exactly the client's messages, over the trigger too, while its
    summary is computed from the trigger on; the first one that does not fit gets it (or is
    trimmed), and the conversation goes on within the window. With late_trim at the trigger,
    trimming starts at the trigger instead."""
    model = f"gpt-rewrite-late-{late_trim}"
    monkeypatch.setitem(upstream.context_windows, model, WINDOW)
    policy: dict[str, Any] = {"context_window": WINDOW, "max_output_tokens": 500, "overflow_wait": 20}
    if late_trim is not None:
        policy["late_trim"] = late_trim
    p = proxy(policies={"default": policy})

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply(content=SUMMARY)
        return Reply(
            content=None, tool_calls=[tool_call("bash", {"command": "cat f.py"}, id=f"c{len(body['messages'])}")]
        )

    upstream.responder = respond
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    requests: list[list[dict[str, Any]]] = []
    conv = ""
    for i in range(24):
        requests.append(messages)
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
        conv = raw.headers["x-conversation-id"]
        answer = raw.parse().choices[0].message.model_dump(exclude_none=True)
        result = {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": f"{i}\n" + "x " * 700}
        messages = [*messages, answer, result]
    sent = agent_requests(upstream, model)
    calls = sorted(p.wait_calls(conv, 24), key=lambda c: c["started_at"])
    records = [c["projection"] for c in calls if c["purpose"] == "main"]
    assert len(sent) == len(records) == 24
    key = "input_budget" if late_trim is None else "trigger_tokens"
    first_over = next(k for k, r in enumerate(records) if r["client_tokens"] > r[key])
    over_trigger = [k for k in range(first_over) if records[k]["client_tokens"] > records[k]["trigger_tokens"]]
    assert bool(over_trigger) is (late_trim is None)  # the default sent requests over the trigger as they were
    for k in range(first_over):  # exactly the client's messages; nothing trimmed
        assert sent[k]["messages"] == requests[k], k
        assert records[k]["trimmed"] == 0 and records[k]["covered_through_seq"] == 0, k
        # a summary is planned (or, once committed, waits) only over the trigger, and only when
        # the request trimmed would still be over it
        planned = records[k]["compaction"] is not None or records[k]["deferred_generation"] is not None
        assert not planned or k in over_trigger, k
    first = records[first_over]
    assert first["trimmed"] > 0 or first["covered_through_seq"] > 0
    assert sent[first_over]["messages"] != requests[first_over]
    assert all(r["sent_tokens"] <= r["input_budget"] for r in records)

"""The OpenAI Agents SDK (`openai-agents`, the `[test]` extra), unchanged, through the proxy: an
`AsyncOpenAI` client whose `base_url` is the proxy, an `Agent` with one function tool (`shell`,
which runs the command in the workspace), `Runner.run` and `Runner.run_streamed`, with the
chat-completions and the Responses model classes; 20+ tool turns with a few KB each at a 16k
window, then the launch code that only the first tool result held. Tracing is off (it would
post to OpenAI).

The SDK's traffic (0.24): chat (`OpenAIChatCompletionsModel`): the agent's `instructions` are
the first `system` message, then the user input, then per turn the assistant's `tool_calls`
(`content: null`) and a `tool` message; every request carries the whole history and `tools` (a
strict schema with `title`s); streamed calls send no `stream_options` (the proxy asks for usage
and hides the extra chunk). Responses (`OpenAIResponsesModel`): `instructions` as the top-level
field, the input as items (the user message, then `function_call` with the server's id and
`status`, `function_call_output`), `include: []`, no `store` and no `previous_response_id` unless
asked for. No session header, no side calls: each run is one conversation by its history.
"""

from __future__ import annotations

import asyncio
import collections
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.agents import harness
from tests.support.responses_upstream import ResponsesReply, ResponsesServer, fcall
from tests.support.upstream_server import Reply, tool_call
from tests.support.waiting import wait_until

pytestmark = pytest.mark.agents

CHAT_MODEL = "gpt-agent-sdk"  # the default gpt-* route to the session's chat upstream
RESPONSES_MODEL = "resp-agent-sdk"
WINDOW = 16_000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 2048,
    "keep_recent_tokens": 4000,
    "summary_chunk_tokens": 6000,
    "overflow_wait": 60,
    "summarizer": {"timeout": 60, "max_attempts": 2},
    "tool_results": {"old_max_chars": 2000},  # as for pi: the history outgrows the window
}
TIMEOUTS = {"connect": 5, "first_byte": 60, "idle": 60, "total": 300}
CLIENT_KEY = "sk-agents-sdk-client-key-0001"
INSTRUCTIONS = "You are a careful operator. Use the shell tool for every command."


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    set_tracing_disabled(True)
    yield


@pytest.fixture
def responses_upstream() -> Any:
    server = ResponsesServer(context_windows={RESPONSES_MODEL: WINDOW}).start()
    yield server
    server.stop()


def _agent(model: Any, cwd: Path) -> Agent[Any]:
    @function_tool
    def shell(command: str) -> str:
        """Run a shell command in the working directory and return its output.

        Args:
            command: the command line to run with /bin/sh.
        """
        done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    return Agent(name="operator", instructions=INSTRUCTIONS, model=model, tools=[shell], model_settings=ModelSettings())


def _run(model_class: Any, model: str, base_url: str, cwd: Path, streamed: bool) -> str:
    async def main() -> str:
        client = AsyncOpenAI(base_url=base_url, api_key=CLIENT_KEY, max_retries=0, timeout=120)
        agent = _agent(model_class(model=model, openai_client=client), cwd)
        if streamed:
            result = Runner.run_streamed(agent, harness.PROMPT, max_turns=harness.STEPS + 5)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, harness.PROMPT, max_turns=harness.STEPS + 5)
        await client.close()
        return str(result.final_output)

    return asyncio.run(main())


def _settled(p: Any, requests: Any, server: Any, answered: Any) -> None:
    """Wait until every request the upstream got is answered and recorded by the proxy: a
    compaction the last turn planned may still be running when the agent is done."""
    harness.wait_idle(p)

    def quiet() -> bool:
        calls = harness.outcome(p, 0).calls
        replies = list(server.replies_sent)
        return (
            len(replies) == len(requests()) == len(calls)
            and all(answered(r) for r in replies)
            and all(c.get("status") != "pending" for c in calls)
        )

    wait_until(quiet, timeout=90, interval=0.5, what="every upstream request answered and recorded")


def _check(p: Any, name: str, answer: str, bodies: list[dict[str, Any]], billed: list[dict[str, int]]) -> None:
    """The CLIs' assertions: the answer with the fact, one request per step and none rejected,
    one conversation, one branch, a committed checkpoint, the ledger equal to the upstream's bill,
    the first estimate within 3% of it."""
    assert harness.FACT in answer, answer
    main = [b for b in bodies if not harness.is_summary(b)]
    assert len(main) == harness.STEPS + 1
    assert len(billed) == len(bodies), "the upstream rejected a request"
    got = harness.outcome(p, len(bodies))
    assert len(got.conversations) == 1, sorted(
        collections.Counter((c["conversation_id"][-4:], c["branch_id"][-4:], c["purpose"]) for c in got.calls).items()
    ) + [p.events(got.conversations[0]["id"])[:4]]
    assert len(got.branches) == 1, got.branches
    assert any(c["status"] == "active" for c in got.checkpoints), got.checkpoints
    assert all(c["status"] == "complete" for c in got.calls), [c["status"] for c in got.calls]
    assert got.ledger["input_total"] == sum(u["input"] for u in billed)
    assert got.ledger["output"] == sum(u["output"] for u in billed)
    assert harness.first_estimate_error(got) < 0.03, harness.report(name, got, len(bodies))
    print(harness.report(name, got, len(bodies)))


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_chat_completions_model(proxy, upstream, monkeypatch, tmp_path, streamed):
    def respond(body: dict[str, Any]) -> Reply:
        if harness.is_summary(body):
            return Reply(content=harness.summary(body))
        step = harness.next_step(body)
        if step < harness.STEPS:
            return Reply(tool_calls=[tool_call("shell", {"command": harness.step_command(step)})])
        return Reply(content=harness.answer(body))

    monkeypatch.setitem(upstream.context_windows, CHAT_MODEL, WINDOW)
    upstream.responder = respond
    p = proxy(fresh=True, policies={"default": POLICY})
    cwd = tmp_path / "work"
    harness.write_workspace(cwd)
    answer = _run(OpenAIChatCompletionsModel, CHAT_MODEL, p.base_url, cwd, streamed)
    _settled(p, lambda: upstream.chat_requests, upstream, lambda r: r.sent_status is not None)
    requests = upstream.chat_requests
    billed = [
        {"input": r.sent_usage["prompt_tokens"], "output": r.sent_usage["completion_tokens"]}
        for r in upstream.replies_sent
        if r.sent_usage
    ]
    name = f"agents sdk chat {'run_streamed' if streamed else 'run'}"
    _check(p, name, answer, [r.body for r in requests], billed)


def _agent_step(body: dict[str, Any]) -> ResponsesReply:
    """The scripted model on the Responses API: a summary when asked, else the harness's next
    shell step, then its answer."""
    if harness.is_summary(body):
        return ResponsesReply(text=harness.summary(body))
    step = harness.next_step(body)
    if step < harness.STEPS:
        return ResponsesReply(calls=[fcall("shell", {"command": harness.step_command(step)})])
    return ResponsesReply(text=harness.answer(body))


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_responses_model(proxy, responses_upstream, tmp_path, streamed):
    responses_upstream.responder = _agent_step
    route = {
        "name": "responses",
        "match": {"model": "resp-*"},
        "upstream": {"base_url": responses_upstream.base_url, "timeouts": TIMEOUTS},  # the client's key
        "policy": "default",
    }
    p = proxy(fresh=True, routes=[route], policies={"default": POLICY})
    cwd = tmp_path / "work"
    harness.write_workspace(cwd)
    answer = _run(OpenAIResponsesModel, RESPONSES_MODEL, p.base_url, cwd, streamed)
    _settled(
        p,
        lambda: [r for r in responses_upstream.requests if r.path.endswith("/responses")],
        responses_upstream,
        lambda r: r.usage is not None,
    )
    requests = [r for r in responses_upstream.requests if r.path.endswith("/responses")]
    billed = [
        {"input": r.usage["input_tokens"], "output": r.usage["output_tokens"]} for r in responses_upstream.replies_sent
    ]
    name = f"agents sdk responses {'run_streamed' if streamed else 'run'}"
    _check(p, name, answer, [r.body for r in requests], billed)


COMPACTING_MODEL = "gpt-4.1-ctxproxy"  # the session refuses a model name that is not OpenAI's


def test_responses_compaction_session(proxy, responses_upstream, tmp_path):
    """`OpenAIResponsesCompactionSession` (input mode) over a SQLite session, through the proxy:
    a run of 24 tool turns, after which the session compacts with `/responses/compact`, then a
    second run whose input starts from the compacted history. Every compaction call succeeds and
    is recorded as `client_compaction`; the second run's requests carry the compaction item as the
    upstream made it (the scripted upstream verifies its seal and refuses any other); it is all
    one conversation, and the ledger equals the upstream's bill, compaction included."""
    from agents import SQLiteSession
    from agents.memory import OpenAIResponsesCompactionSession

    def respond(body: dict[str, Any]) -> ResponsesReply:
        if any(isinstance(i, dict) and i.get("type") == "compaction" for i in body.get("input") or []):
            return ResponsesReply(text="Still there: the work above is done.")
        return _agent_step(body)

    responses_upstream.responder = respond
    route = {
        "name": "responses",
        "match": {"model": "gpt-4.1-*"},
        "upstream": {"base_url": responses_upstream.base_url, "timeouts": TIMEOUTS},
        "policy": "default",
    }
    p = proxy(fresh=True, routes=[route], policies={"default": POLICY})
    cwd = tmp_path / "work"
    harness.write_workspace(cwd)

    async def main() -> tuple[str, str]:
        client = AsyncOpenAI(base_url=p.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=120)
        session = OpenAIResponsesCompactionSession(
            session_id="ops-1",
            underlying_session=SQLiteSession("ops-1", str(tmp_path / "session.db")),
            client=client,
            model=COMPACTING_MODEL,
            compaction_mode="input",
        )
        agent = _agent(OpenAIResponsesModel(model=COMPACTING_MODEL, openai_client=client), cwd)
        first = await Runner.run(agent, harness.PROMPT, max_turns=harness.STEPS + 5, session=session)
        second = await Runner.run(agent, "Anything left to do?", max_turns=5, session=session)
        await client.close()
        return str(first.final_output), str(second.final_output)

    first, second = asyncio.run(main())
    assert harness.FACT in first, first
    assert second == "Still there: the work above is done."
    compactions = responses_upstream.compactions
    assert compactions and all(c["via"] == "compact" for c in compactions)
    made = {k: v for k, v in compactions[-1]["item"].items() if v is not None}  # the SDK drops nulls
    later = [r.body for r in responses_upstream.requests if r.path == "/v1/responses"][-1]
    assert [i for i in later["input"] if i.get("type") == "compaction"] == [made]
    harness.wait_idle(p)
    got = harness.outcome(p, len(responses_upstream.requests))
    assert len(got.conversations) == 1, sorted(
        collections.Counter((c["conversation_id"][-4:], c["branch_id"][-4:], c["purpose"]) for c in got.calls).items()
    ) + [p.events(got.conversations[0]["id"])[:4]]
    purposes = [c["purpose"] for c in got.calls]
    assert purposes.count("client_compaction") == len(compactions)
    assert all(c["status"] == "complete" for c in got.calls), [(c["purpose"], c["status"]) for c in got.calls]
    billed = [r.usage for r in responses_upstream.replies_sent if r.usage]
    compact_usage = [c["usage"] for c in got.calls if c["purpose"] == "client_compaction"]
    assert got.ledger["input_total"] == sum(u["input_tokens"] for u in billed) + sum(
        u["input_total"] for u in compact_usage
    )

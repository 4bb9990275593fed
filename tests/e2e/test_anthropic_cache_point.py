"""The cache point on the Anthropic wire: a Claude Code-style client (breakpoints on its system
prompt and on its newest message) through the real proxy, with the anthropic SDK, against the
scripted upstream, which bills a breakpoint whose prefix it has seen as a cache read.

Once the history crosses the trigger, the trim boundary moves every few turns and each move
rewrites the results that turn old. Without a breakpoint of the proxy's own at the last old
result, such a move reads only the system prompt from the cache and writes everything else at
1.25x; with it, the move reads through the previous point. With groups of parallel calls the
previous point is more than the API's 20-block lookback back from the new one, so it carries a
breakpoint too on a move.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_upstream import AnthropicUpstream, Reply
from tests.support.e2e import asks_shared_summary
from tests.unit.test_ledger import parse_metrics

pytestmark = pytest.mark.slow

MODEL = "claude-cache-1"
CC = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "You are a careful coding agent. " * 40, "cache_control": CC}]
TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]
POLICY = {"context_window": 25_000, "max_output_tokens": 1_000}  # 2 recent groups, a move every 4
LONGER = {**POLICY, "tool_results": {"old_max_chars": 200}}
# ... old results short enough that the 48 turns it takes to see 5 moves need no compaction
WIDER = {
    "context_window": 40_000,
    "max_output_tokens": 1_000,
    "tool_results": {"old_max_chars": 100},
    "first_rewrite": "trim",
}
# ... 4 recent groups, a move every 4; old results short enough that 40 turns need no compaction
# (and the first rewrite trims: this test is about the moves of the trim boundary)


def _route(server: AnthropicUpstream) -> dict[str, Any]:
    return {
        "name": "claude",
        "match": {"model": "claude-*", "path": "/v1/messages"},
        "upstream": {"base_url": server.url, "api_key_env": "UPSTREAM_KEY"},
        "policy": "default",
    }


def _output(step: int, lines: int) -> str:
    return "".join(f"step {step} line {k}: compiled module_{k}.py with 0 warnings\n" for k in range(lines))


def _unmarked(message: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(message)
    for block in out["content"] if isinstance(out["content"], list) else []:
        block.pop("cache_control", None)
    return out


def _marked_results(body: dict[str, Any]) -> list[int]:
    """Positions of the messages (all but the newest) whose tool_result carries a breakpoint."""
    return [
        i
        for i, m in enumerate(body["messages"][:-1])
        if isinstance(m["content"], list)
        and any(b.get("type") == "tool_result" and b.get("cache_control") for b in m["content"])
    ]


@pytest.mark.parametrize(
    ("parallel", "policy", "lines", "steps"),
    [(1, LONGER, 60, 48), (3, WIDER, 40, 40)],
    ids=["one-call", "three-parallel-calls"],
)
def test_a_trim_boundary_move_reads_the_old_results_from_the_cache(
    proxy, anthropic_upstream, api_key, parallel, policy, lines, steps
):
    # one call per group: 3 blocks a group, 12 between two points; three: 7 a group, 28 between
    p = proxy(routes=[_route(anthropic_upstream)], policies={"default": policy})
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)
    anthropic_upstream.responder = lambda body: Reply(
        text="next", tool_uses=[{"name": "bash", "input": {"cmd": f"make part{k}"}} for k in range(parallel)]
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Build every module."}]}]
    usages = []
    for step in range(steps):
        newest = copy.deepcopy(messages[-1])
        newest["content"][-1]["cache_control"] = CC  # Claude Code's moving breakpoint
        reply = client.messages.create(
            model=MODEL, max_tokens=512, system=SYSTEM, tools=TOOLS, messages=[*messages[:-1], newest]
        )
        usages.append(reply.usage)
        uses = [b for b in reply.content if b.type == "tool_use"]
        assert len(uses) == parallel
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        results = [{"type": "tool_result", "tool_use_id": use.id, "content": _output(step, lines)} for use in uses]
        messages.append({"role": "user", "content": results})

    assert anthropic_upstream.rejections == []
    sent = anthropic_upstream.message_requests
    assert len(sent) == steps
    moves = crossings = 0
    system_prompt = usages[0].input_tokens + (usages[0].cache_creation_input_tokens or 0)  # and the task
    for before, after, usage in zip(sent[:-1], sent[1:], usages[1:], strict=True):
        old, new = before.body["messages"], after.body["messages"]
        first_change = next(
            (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if _unmarked(a) != _unmarked(b)),
            min(len(old), len(new)),
        )
        points = _marked_results(after.body)
        assert len(points) <= (1 if parallel == 1 else 2)
        if first_change >= len(old) - 1:
            continue  # only appended to: the client's own breakpoint reads the previous request
        if not _marked_results(before.body):
            crossings += 1  # the request that crossed the trigger: trimming starts, nothing to read
            continue
        moves += 1
        # a move: the results that turned old were rewritten, after the previous cache point,
        # and the new request read everything up to that point from the cache
        previous = _marked_results(before.body)[-1]
        assert first_change > previous
        read, written = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
        if parallel == 1:
            assert read > (usage.input_tokens + read + written) / 2, (moves, usage)
        else:  # the old results are short next to 4 recent groups of 3: more than the system prompt
            assert read > 3 * system_prompt, (moves, usage)
        assert points and points[-1] > previous
        assert points[0] == previous if parallel > 1 else points == [points[-1]]
    assert crossings == 1 and moves >= 5


SUMMARY = "## Goal\nBuild every module.\n## Constraints\nnone\n## Key facts\nnone\n## Next step\nContinue."


def _markers(body: dict[str, Any]) -> list[tuple[int, str]]:
    """(message position, block kind) of every message block that carries a breakpoint."""
    return [
        (i, "summary" if "<conversation_summary" in str(b.get("text", "")) else b["type"])
        for i, m in enumerate(body["messages"])
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("cache_control")
    ]


@pytest.mark.parametrize("tools_marked", [True, False], ids=["client-uses-4", "client-uses-3"])
def test_the_cap_of_4_drops_the_proxys_own_breakpoints_never_the_clients(
    proxy, anthropic_upstream, api_key, tools_marked
):
    """A client that marks its objective (an old message) besides system, newest message and
    maybe tools: over the API's 4 the proxy's own breakpoints go (the summary's first), the
    client's all stay, and the upstream (which answers 5 with the API's 400) never refuses."""
    policy = {
        "context_window": 16_000,
        "max_output_tokens": 1_000,
        "keep_recent_tokens": 3_000,
        "tool_results": {"old_max_chars": 1_200},  # old results large enough to compact within 40 turns
        "summarizer": {"timeout": 5},
    }
    p = proxy(routes=[_route(anthropic_upstream)], policies={"default": policy})
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)

    def respond(body: dict[str, Any]) -> Reply:
        if str(body.get("system", "")).startswith("You compress the history") or asks_shared_summary(body):
            return Reply(text=SUMMARY)
        return Reply(text="next", tool_uses=[{"name": "bash", "input": {"cmd": "make"}}])

    anthropic_upstream.responder = respond
    tools = [{**TOOLS[0], "cache_control": CC}] if tools_marked else TOOLS
    objective = {"role": "user", "content": [{"type": "text", "text": "Build every module.", "cache_control": CC}]}
    messages: list[dict[str, Any]] = [objective]
    for step in range(40):
        newest = copy.deepcopy(messages[-1])
        newest["content"][-1]["cache_control"] = CC
        sent = [*messages[:-1], newest] if step else [newest]
        reply = client.messages.create(model=MODEL, max_tokens=512, system=SYSTEM, tools=tools, messages=sent)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        use = next(b for b in reply.content if b.type == "tool_use")
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": _output(step, 60)}]}
        )

    assert anthropic_upstream.rejections == []
    # the agent's turns (a shared summary request, the default mode's, repeats one plus the ask)
    bodies = [r.body for r in anthropic_upstream.message_requests if r.body.get("system") == SYSTEM]
    agent = [body for body in bodies if not asks_shared_summary(body)]
    assert len(agent) == 40
    own_seen = set()
    for body in agent:
        found, last = _markers(body), len(body["messages"]) - 1
        own = [f for f in found if f[1] == "summary" or (f[1] == "tool_result" and f[0] != last)]
        clients = [f for f in found if f not in own]
        assert (
            clients[0] == (0, "text") and clients[-1][0] == last and len(clients) == min(2, 1 + last)
        )  # objective, newest
        assert (body["tools"][0].get("cache_control") == CC) is tools_marked
        assert 1 + int(tools_marked) + len(found) <= 4
        if tools_marked:
            assert own == []  # the client uses all 4
        else:
            assert len(own) <= 1 and all(kind == "tool_result" for _, kind in own)  # the point outranks the summary
            own_seen.update(kind for _, kind in own)
    assert any("<conversation_summary" in str(b["messages"]) for b in agent), "no compaction: the test needs one"
    assert own_seen == (set() if tools_marked else {"tool_result"})


@pytest.mark.parametrize("first_rewrite", ["compact", "trim"])
def test_the_first_rewrite_is_the_compaction(proxy, anthropic_upstream, api_key, first_rewrite):
    """The first request that no longer fits as sent rewrites the prefix either way. By default
    (`compact`) that rewrite is the compaction: the summarizer is called before the request goes,
    and the request carries the summary, so no request is ever sent trimmed without it (each
    would be one more full cache write). With `trim` the first rewrite is a trim alone."""
    policy = {"context_window": 40_000, "max_output_tokens": 1_000, "first_rewrite": first_rewrite}
    p = proxy(routes=[_route(anthropic_upstream)], policies={"default": {**policy, "summarizer": {"timeout": 10}}})
    client = anthropic.Anthropic(base_url=p.url, api_key=api_key, max_retries=0, timeout=30)
    # the agent reasons at length each turn, which no trim shortens: trimmed, the first request
    # that no longer fits still lands above the target, so a summary has something to do
    reasoning = "I will build the next module, then check its warnings before going on. " * 30

    def respond(body: dict[str, Any]) -> Reply:
        if str(body.get("system", "")).startswith("You compress the history") or asks_shared_summary(body):
            return Reply(text=SUMMARY)
        return Reply(text=reasoning, tool_uses=[{"name": "bash", "input": {"cmd": "make"}}])

    anthropic_upstream.responder = respond
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Build every module."}]}]
    conversation = None
    for step in range(60):
        newest = copy.deepcopy(messages[-1])
        newest["content"][-1]["cache_control"] = CC
        raw = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=512, system=SYSTEM, tools=TOOLS, messages=[*messages[:-1], newest]
        )
        conversation, reply = raw.headers["x-conversation-id"], raw.parse()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        use = next(b for b in reply.content if b.type == "tool_use")
        result = {"type": "tool_result", "tool_use_id": use.id, "content": _output(step, 40)}
        messages.append({"role": "user", "content": [result]})
        if any(r["purpose"] == "main" and r["projection"]["trimmed"] for r in p.calls(conversation)):
            break  # the first rewrite went

    assert anthropic_upstream.rejections == []
    log = anthropic_upstream.message_requests
    # the agent's turns (a shared summary request, the default mode's, repeats one plus the ask)
    agent = [i for i, r in enumerate(log) if r.body.get("system") == SYSTEM and not asks_shared_summary(r.body)]
    first = agent[-1]  # the first rewritten request
    carries = "<conversation_summary" in json.dumps(log[first].body)
    records = sorted((c for c in p.calls(conversation) if c["purpose"] == "main"), key=lambda c: c["started_at"])
    assert all(not r["projection"]["trimmed"] for r in records[:-1])  # the ones before went as sent
    went = records[-1]["projection"]  # what was sent: after the commit it waited for
    summaries = [i for i, r in enumerate(log) if i not in agent]
    if first_rewrite == "compact":
        assert summaries and max(summaries) < first and carries and went["covered_through_seq"] > 0
    else:
        assert not summaries and not carries and went["covered_through_seq"] == 0
    # the metric counts the one request that waited for its summary (`ctxproxy_summary_wait_seconds`)
    metrics = parse_metrics(httpx.get(f"{p.url}/metrics", timeout=10).text)
    waits = {
        dict(labels)["outcome"]: value
        for (name, labels), value in metrics.items()
        if name == "ctxproxy_summary_wait_seconds_count"
    }
    assert waits == ({"committed": 1} if first_rewrite == "compact" else {})

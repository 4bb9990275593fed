"""The usage ledger (`GET /admin/usage`) and Prometheus `/metrics` against what the scripted
upstream reported, through the real proxy."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from proxy.catalog import ModelCatalog
from tests.e2e.test_rewriting import OBJECTIVE, SMALL_POLICY, SUMMARY, SYSTEM, is_summary_request, wait_checkpoints
from tests.support.e2e import stream_raw, user
from tests.support.proxy_process import ADMIN_TOKEN
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until
from tests.unit.test_ledger import parse_metrics

pytestmark = pytest.mark.slow

FIELDS = ("input_total", "input_uncached", "cache_read", "cache_write", "output", "reasoning")


def price(model: str, usage: dict[str, Any]) -> float:
    info = ModelCatalog().info(model)
    assert info is not None and info.input_cost_per_token is not None and info.output_cost_per_token is not None
    read = info.cache_read_cost_per_token if info.cache_read_cost_per_token is not None else info.input_cost_per_token
    return (
        usage["input_uncached"] * info.input_cost_per_token
        + usage["cache_read"] * read
        + usage["output"] * info.output_cost_per_token
    )


def turn(
    p: Any,
    api_key: str,
    messages: list[dict[str, Any]],
    stream: bool,
    client_usage: bool = False,
    model: str = "gpt-4o",
) -> httpx.Response:
    """One request; the conversation is found from the history (its id is in the response)."""
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": stream}
    if client_usage:
        body["stream_options"] = {"include_usage": True}
    if stream:
        r, _ = stream_raw(p.base_url, api_key, body)
    else:
        r = p.post_chat(api_key, body)
    assert r.status_code == 200, r.text
    return r


def usage_of(p: Any, **params: Any) -> dict[str, Any]:
    return p.admin_json("usage", params={k: v for k, v in params.items() if v is not None})


SCRIPT = [  # (stream, client asks for usage, prompt, completion, cached, reasoning)
    (False, False, 1200, 80, 512, 0),
    (True, False, 1500, 60, 1024, 16),
    (True, True, 1700, 45, 1280, 0),
    (False, False, 2100, 120, 0, 32),
]


def run_script(p: Any, upstream: Any, api_key: str) -> tuple[str, list[dict[str, int]]]:
    """Four turns of one conversation, streamed and not; its id and the usage upstream reported."""
    messages: list[dict[str, Any]] = []
    reported = []
    conv = ""
    for i, (stream, client_usage, prompt, completion, cached, reasoning) in enumerate(SCRIPT):
        upstream.push(
            Reply(
                content=f"answer {i}",
                prompt_tokens=prompt,
                completion_tokens=completion,
                cached_tokens=cached,
                reasoning_tokens=reasoning,
            )
        )
        messages.append(user(f"question {i} of {api_key}"))
        conv = turn(p, api_key, list(messages), stream, client_usage).headers["x-conversation-id"]
        sent = upstream.last_reply
        raw = sent.sent_chunks()[-1]["usage"] if stream else sent.sent_json()["usage"]
        reported.append(
            {
                "input_total": raw["prompt_tokens"],
                "cached": raw["prompt_tokens_details"]["cached_tokens"],
                "output": raw["completion_tokens"],
                "reasoning": raw["completion_tokens_details"]["reasoning_tokens"],
            }
        )
        messages.append({"role": "assistant", "content": f"answer {i}"})
    return conv, reported


def test_ledger_equals_what_the_upstream_reported(proxy, upstream, api_key):
    p = proxy()
    conv, reported = run_script(p, upstream, api_key)
    calls = p.wait_calls(conv, len(SCRIPT))
    internal = calls[0]["conversation_id"]
    assert {c["conversation_id"] for c in calls} == {conv}
    totals = usage_of(p, conversation=internal)["totals"]

    assert totals["calls"] == 4
    assert totals["calls_by_purpose"] == {"main": 4}
    assert totals["calls_by_status"] == {"complete": 4}
    assert totals["input_total"] == sum(u["input_total"] for u in reported)
    # cached tokens are part of prompt_tokens: counted once, as cache_read, not again as input
    assert totals["cache_read"] == sum(u["cached"] for u in reported)
    assert totals["input_uncached"] == sum(u["input_total"] - u["cached"] for u in reported)
    assert totals["input_uncached"] + totals["cache_read"] == totals["input_total"]
    assert totals["output"] == sum(u["output"] for u in reported)
    assert totals["reasoning"] == sum(u["reasoning"] for u in reported)
    # OpenAI chat reports no cache writes: unknown, not 0
    assert totals["cache_write"] is None and totals["unknown"]["cache_write"] == 4
    assert totals["unknown"]["input_total"] == 0 and totals["unknown"]["cost_usd"] == 0
    expected_cost = sum(
        price(
            "gpt-4o",
            {"input_uncached": u["input_total"] - u["cached"], "cache_read": u["cached"], "output": u["output"]},
        )
        for u in reported
    )
    assert totals["cost_usd"] == pytest.approx(expected_cost)
    assert sum(c["cost_usd"] for c in calls) == pytest.approx(expected_cost)
    for call in calls:
        assert call["cost_usd"] == pytest.approx(price("gpt-4o", call["usage"]))
    # nothing was rewritten in a conversation this small
    assert (
        totals["tokens_saved"]
        == sum(c["projection"]["client_tokens"] - c["projection"]["sent_tokens"] for c in calls)
        == 0
    )

    # the ledger is read from the records (one per call id): asking again books nothing twice
    assert usage_of(p, conversation=internal)["totals"] == totals


def test_filters_and_group_by(proxy, upstream, api_key):
    p = proxy()
    t0 = time.time()
    upstream.push(Reply(content="a", prompt_tokens=100, completion_tokens=10, cached_tokens=40))
    r1 = turn(p, api_key, [user("group a")], stream=False)
    upstream.push(Reply(content="b", prompt_tokens=200, completion_tokens=20, cached_tokens=0))
    r2 = turn(p, api_key, [user("group b")], stream=True, model="gpt-unpriced-xyz")
    upstream.push(Reply(content="c", prompt_tokens=300, completion_tokens=30))
    r3 = p.post_chat(api_key, {"model": "pass-through-model", "messages": [user("group c")]})
    assert r3.status_code == 200
    convs = []
    for r in (r1, r2, r3):
        convs.append(p.wait_calls(r.headers["x-conversation-id"], 1)[0]["conversation_id"])
    tenant = p.conversation(convs[0])["tenant"]

    everything = usage_of(p, tenant=tenant)
    assert everything["filter"]["tenant"] == tenant and "groups" not in everything
    totals = everything["totals"]
    assert totals["calls"] == 3 and totals["input_total"] == 600 and totals["output"] == 60
    # one priced call; the unknown models' costs are unknown, not 0
    assert totals["unknown"]["cost_usd"] == 2
    assert totals["cost_usd"] == pytest.approx(price("gpt-4o", {"input_uncached": 60, "cache_read": 40, "output": 10}))

    by_route = usage_of(p, tenant=tenant, group_by="route")
    assert by_route["group_by"] == "route"
    groups = {g["key"]: g for g in by_route["groups"]}
    assert set(groups) == {"main", "passthrough"}
    assert groups["main"]["calls"] == 2 and groups["main"]["input_total"] == 300
    assert groups["passthrough"]["calls"] == 1 and groups["passthrough"]["cost_usd"] is None
    assert groups["passthrough"]["unknown"]["cost_usd"] == 1

    by_model = {g["key"]: g for g in usage_of(p, tenant=tenant, group_by="model")["groups"]}
    assert set(by_model) == {"gpt-4o", "gpt-unpriced-xyz", "pass-through-model"}
    assert by_model["gpt-4o"]["cost_usd"] is not None and by_model["gpt-unpriced-xyz"]["cost_usd"] is None

    by_conv = {g["key"]: g for g in usage_of(p, tenant=tenant, group_by="conversation")["groups"]}
    assert set(by_conv) == set(convs)
    assert by_conv[convs[1]]["input_total"] == 200

    only_main = usage_of(p, tenant=tenant, route="main")["totals"]
    assert only_main["calls"] == 2
    one_conv = usage_of(p, conversation=convs[2])["totals"]
    assert one_conv["calls"] == 1 and one_conv["input_total"] == 300
    assert usage_of(p, tenant=tenant, since=t0 - 1)["totals"]["calls"] == 3
    assert usage_of(p, tenant=tenant, since=time.time() + 60)["totals"]["calls"] == 0
    assert usage_of(p, tenant=tenant, until=t0 - 1)["totals"]["calls"] == 0
    empty = usage_of(p, tenant="t_nobody")["totals"]
    assert empty["calls"] == 0 and empty["input_total"] is None and empty["cost_usd"] is None

    assert p.admin("usage", params={"group_by": "planet"}).status_code == 400
    assert p.admin("usage", params={"since": "yesterday"}).status_code == 400
    assert p.admin("usage", token="wrong").status_code == 401
    assert p.admin("usage", token=None).status_code == 401


def test_error_calls_count_but_their_usage_stays_unknown(proxy, upstream, api_key):
    p = proxy()
    opened = p.client(api_key).chat.completions.with_raw_response.create(model="gpt-4o", messages=[user("opens")])
    history = [user("opens"), opened.parse().choices[0].message.model_dump(exclude_none=True), user("fails")]
    upstream.push(Reply(status=500))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": history})
    assert r.status_code == 500
    call = p.wait_calls(r.headers["x-conversation-id"], 2)[-1]
    totals = usage_of(p, conversation=call["conversation_id"], since=call["started_at"])["totals"]
    assert totals["calls"] == 1 and totals["calls_by_status"] == {"error": 1}
    assert all(totals[f] is None for f in (*FIELDS, "cost_usd"))
    assert all(totals["unknown"][f] == 1 for f in (*FIELDS, "cost_usd"))
    assert call["cost_usd"] is None


def grow(p: Any, api_key: str, turns: int = 25, until: Callable[[], bool] = lambda: False) -> str:
    """A conversation grown by `turns` long user turns at the small policy's window (enough to
    compact), or until `until()` after a turn; its id."""
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
    conv = None
    for i in range(turns):
        messages.append({"role": "user", "content": f"turn {i}: " + "word " * 120})
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
        conv = raw.headers["x-conversation-id"]
        messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        if until():
            break
    assert conv is not None
    return conv


def test_summary_calls_in_ledger_and_metrics(proxy, upstream, api_key):
    """Compaction's summarizer calls are in the ledger with purpose summary, in the token and
    cost counters, and the compaction itself in ctxproxy_compactions_total."""
    p = proxy(fresh=True, policies={"default": SMALL_POLICY})
    upstream.responder = lambda body: (
        Reply(content=SUMMARY, prompt_tokens=900, completion_tokens=70, cached_tokens=100)
        if is_summary_request(body)
        else None
    )
    conv = grow(p, api_key)
    checkpoints = wait_checkpoints(p, conv, timeout=30)
    assert checkpoints, "no compaction happened"
    calls = p.wait_calls(conv, 26, until=lambda cs: any(c["purpose"] == "summary" for c in cs))
    summaries = [c for c in calls if c["purpose"] == "summary"]
    mains = [c for c in calls if c["purpose"] == "main"]
    assert summaries and all(c["usage"]["input_total"] == 900 for c in summaries)
    assert all(c["cost_usd"] == pytest.approx(price("gpt-4o", c["usage"])) for c in summaries)

    result = usage_of(p, conversation=conv)
    totals = result["totals"]
    assert totals["calls_by_purpose"] == {"main": len(mains), "summary": len(summaries)}
    assert totals["input_total"] == sum(c["usage"]["input_total"] for c in calls)
    assert totals["cache_read"] == sum(c["usage"]["cache_read"] for c in calls)
    assert totals["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls))
    saved = sum(c["projection"]["client_tokens"] - c["projection"]["sent_tokens"] for c in mains)
    assert totals["tokens_saved"] == saved and saved > 0  # the summary replaced history

    metrics = parse_metrics(httpx.get(f"{p.url}/metrics", timeout=10).text)

    def value(name: str, **labels: str) -> float:
        return metrics.get((name, frozenset(labels.items())), 0.0)

    assert value("ctxproxy_requests_total", route="main", wire="openai_chat", status="complete") == len(mains)
    assert value("ctxproxy_tokens_total", route="main", kind="input") == totals["input_total"]
    assert value("ctxproxy_tokens_total", route="main", kind="cache_read") == totals["cache_read"]
    assert value("ctxproxy_tokens_total", route="main", kind="output") == totals["output"]
    assert value("ctxproxy_tokens_saved_total", route="main") == saved
    assert value("ctxproxy_cost_usd_total", route="main") == pytest.approx(totals["cost_usd"])
    committed = len([c for c in checkpoints if c["status"] in ("active", "superseded")])
    assert value("ctxproxy_compactions_total", result="committed") == committed >= 1


def test_metrics_after_n_requests(proxy, upstream, api_key):
    p = proxy(fresh=True)
    r = httpx.get(f"{p.url}/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    baseline = parse_metrics(r.text)
    assert baseline[("ctxproxy_compactions_total", frozenset({("result", "failed")}))] == 0

    conv, reported = run_script(p, upstream, api_key)
    upstream.push(Reply(status=429))
    assert p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("limited")]}).status_code == 429
    refused = p.post_chat(api_key, {"model": "refused-1", "messages": [user("nobody home")]})
    assert refused.status_code == 502
    upstream.push(Reply(content="cut short", drop_after_chunks=2))
    stream_raw(p.base_url, api_key, {"model": "gpt-4o", "messages": [user("drop me")], "stream": True})
    p.wait_calls(conv, 4)

    def all_seven_counted() -> dict[Any, float] | None:  # records of the last calls land after their answers
        metrics = parse_metrics(httpx.get(f"{p.url}/metrics", timeout=10).text)
        total = sum(v for (name, _), v in metrics.items() if name == "ctxproxy_requests_total")
        return metrics if total >= 7 else None

    metrics = wait_until(all_seven_counted)

    def value(name: str, **labels: str) -> float:
        return metrics.get((name, frozenset(labels.items())), 0.0)

    assert value("ctxproxy_requests_total", route="main", wire="openai_chat", status="complete") == 4
    assert value("ctxproxy_requests_total", route="main", wire="openai_chat", status="error") == 1
    assert value("ctxproxy_requests_total", route="main", wire="openai_chat", status="partial") == 1
    assert value("ctxproxy_requests_total", route="refused", wire="openai_chat", status="error") == 1
    assert value("ctxproxy_upstream_errors_total", route="main", kind="http_429") == 1
    assert value("ctxproxy_upstream_errors_total", route="refused", kind="connect") == 1
    assert (
        value("ctxproxy_upstream_errors_total", route="main", kind="broken")
        + value("ctxproxy_upstream_errors_total", route="main", kind="truncated")
        == 1
    )
    assert value("ctxproxy_tokens_total", route="main", kind="input") == sum(u["input_total"] for u in reported)
    assert value("ctxproxy_tokens_total", route="main", kind="cache_read") == sum(u["cached"] for u in reported)
    assert value("ctxproxy_tokens_total", route="main", kind="output") == sum(u["output"] for u in reported)
    assert value("ctxproxy_tokens_total", route="main", kind="reasoning") == sum(u["reasoning"] for u in reported)
    assert value("ctxproxy_tokens_total", route="main", kind="cache_write") == 0
    ledger = usage_of(p, route="main")["totals"]
    assert value("ctxproxy_cost_usd_total", route="main") == pytest.approx(ledger["cost_usd"])
    assert value("ctxproxy_request_duration_seconds_count", route="main", wire="openai_chat") == 6
    assert value("ctxproxy_request_duration_seconds_bucket", route="main", wire="openai_chat", le="+Inf") == 6
    assert value("ctxproxy_ttfb_seconds_count", route="main", wire="openai_chat") >= 5
    buckets = sorted(
        (float(dict(labels)["le"]), v)
        for (name, labels), v in metrics.items()
        if name == "ctxproxy_request_duration_seconds_bucket" and dict(labels)["route"] == "main"
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    assert value("ctxproxy_compactions_total", result="committed") == 0


def test_metrics_token(proxy):
    # the admin token's variable doubles as the metrics token here (the test env is fixed)
    p = proxy(metrics_token_env="CTXPROXY_ADMIN_TOKEN")
    assert httpx.get(f"{p.url}/metrics", timeout=10).status_code == 401
    bad = httpx.get(f"{p.url}/metrics", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_metrics_token"
    ok = httpx.get(f"{p.url}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)
    assert ok.status_code == 200 and "ctxproxy_requests_total" in ok.text
    closed = proxy(metrics_token_env="CTXPROXY_METRICS_TOKEN_NOT_SET")
    assert httpx.get(f"{closed.url}/metrics", timeout=10).status_code == 404


def test_compactions_running_gauge_counts_a_summarizing_job(proxy, upstream, api_key):
    """`ctxproxy_compactions_running` is 1 while the summarizer's answer is on its way (held 3 s),
    then 0 once the checkpoint is committed: what a test or an operator waits on before reading
    the bill."""
    p = proxy(fresh=True, policies={"default": SMALL_POLICY})
    upstream.responder = lambda body: (
        Reply(content=SUMMARY, delay_before_headers=3) if is_summary_request(body) else None
    )

    def running() -> float:
        metrics = parse_metrics(httpx.get(f"{p.url}/metrics", timeout=10).text)
        return metrics[("ctxproxy_compactions_running", frozenset())]

    assert running() == 0
    conv = grow(p, api_key, until=lambda: running() == 1)
    assert running() == 1, "no compaction started"
    wait_until(lambda: running() == 0, timeout=30, interval=0.1, what="the compaction to finish")
    assert wait_checkpoints(p, conv, timeout=30)


def test_since_and_until_take_iso_dates_and_records_show_iso_times(proxy, upstream, api_key):
    p = proxy()
    upstream.push(Reply(content="a", prompt_tokens=100, completion_tokens=10))
    r = turn(p, api_key, [user("iso dates")], stream=False)
    conv = r.headers["x-conversation-id"]
    call = p.wait_calls(conv, 1)[0]
    started = datetime.fromtimestamp(call["started_at"], UTC)
    assert datetime.fromisoformat(call["started_at_iso"]) == started.replace(
        microsecond=started.microsecond // 1000 * 1000
    )
    conversation = p.conversation(conv)
    assert conversation["created_at_iso"].endswith("Z") and conversation["updated_at_iso"].startswith(
        f"{started.year}-"
    )
    tenant = conversation["tenant"]
    today = started.date().isoformat()
    tomorrow = (started + timedelta(days=1)).date().isoformat()
    assert usage_of(p, tenant=tenant, since=today)["totals"]["calls"] == 1
    assert usage_of(p, tenant=tenant, since=today, until=tomorrow)["totals"]["calls"] == 1
    assert usage_of(p, tenant=tenant, since=tomorrow)["totals"]["calls"] == 0
    minute_before = (started - timedelta(minutes=1)).isoformat(timespec="seconds").replace("+00:00", "Z")
    assert usage_of(p, tenant=tenant, since=minute_before)["totals"]["calls"] == 1
    shifted = (started + timedelta(minutes=1)).astimezone(timezone(timedelta(hours=2))).isoformat()
    assert usage_of(p, tenant=tenant, since=shifted)["totals"]["calls"] == 0  # an offset is honoured
    by_day = usage_of(p, tenant=tenant, group_by="day")["groups"]
    assert [(g["key"], g["calls"]) for g in by_day] == [(today, 1)]
    assert [g["key"] for g in usage_of(p, since=today, group_by="tenant")["groups"]].count(tenant) == 1
    refused = p.admin("usage", params={"since": "2026-13-45"})
    assert refused.status_code == 400 and "ISO 8601" in refused.json()["error"]["message"]

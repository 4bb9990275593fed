"""Cost arithmetic, ledger totals (unknown is not 0, a call counts once) and the metrics text."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from proxy.catalog import ModelCatalog, ModelInfo
from proxy.ledger import call_cost, cells_from_calls, saved_cost, summarize
from proxy.metrics import Metrics
from proxy.protocols.openai_chat.usage import from_openai_chat
from proxy.store.base import CallRecord, UsageQuery
from proxy.store.sqlite import SqliteStore
from proxy.upstream.litellm import usage_from_litellm
from proxy.usage import Usage

CATALOG = ModelCatalog()
PRICED = ModelInfo(
    context_window=1000,
    max_output_tokens=100,
    input_cost_per_token=2e-6,
    output_cost_per_token=8e-6,
    cache_read_cost_per_token=5e-7,
    cache_write_cost_per_token=2.5e-6,
)


def test_openai_cached_tokens_are_inside_the_input_total() -> None:
    usage = from_openai_chat(
        {"prompt_tokens": 1000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 400}}
    ).to_dict()
    info = CATALOG.info("gpt-4o")
    assert info is not None and info.cache_read_cost_per_token is not None
    expected = 600 * info.input_cost_per_token + 400 * info.cache_read_cost_per_token + 100 * info.output_cost_per_token
    assert call_cost(usage, info) == pytest.approx(expected)
    # the cached tokens are billed once, at the cache price: not 1000 input + 400 cached
    assert call_cost(usage, info) < 1000 * info.input_cost_per_token + 100 * info.output_cost_per_token


def test_anthropic_fields_are_disjoint() -> None:
    # input_tokens 50, cache_read_input_tokens 200, cache_creation_input_tokens 30, output 9
    usage = Usage(input_total=280, input_uncached=50, cache_read=200, cache_write=30, output=9).to_dict()
    info = CATALOG.info("anthropic/claude-haiku-4-5")
    assert info is not None and info.cache_write_cost_per_token is not None
    assert info.cache_read_cost_per_token is not None
    expected = (
        50 * info.input_cost_per_token
        + 200 * info.cache_read_cost_per_token
        + 30 * info.cache_write_cost_per_token
        + 9 * info.output_cost_per_token
    )
    assert call_cost(usage, info) == pytest.approx(expected)


def test_litellm_usage_moves_cache_writes_out_of_the_uncached_input() -> None:
    """litellm reports Anthropic usage in OpenAI's shape: prompt_tokens includes reads and writes."""
    raw = {
        "prompt_tokens": 280,
        "completion_tokens": 9,
        "total_tokens": 289,
        "prompt_tokens_details": {"cached_tokens": 200, "cache_creation_tokens": 30},
        "cache_creation_input_tokens": 30,
        "cache_read_input_tokens": 200,
    }
    assert usage_from_litellm(raw) == Usage(
        input_total=280, input_uncached=50, cache_read=200, cache_write=30, output=9, reasoning=None
    )
    # an OpenAI usage through litellm stays what from_openai_chat says
    openai_raw = {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 40}}
    assert usage_from_litellm(openai_raw) == from_openai_chat(openai_raw)
    assert usage_from_litellm(None) == Usage()


def test_missing_cache_prices_fall_back_to_the_input_price() -> None:
    info = ModelInfo(context_window=10, max_output_tokens=1, input_cost_per_token=1e-6, output_cost_per_token=2e-6)
    usage = {"input_total": 100, "input_uncached": 60, "cache_read": 30, "cache_write": 10, "output": 5}
    assert call_cost(usage, info) == pytest.approx(100 * 1e-6 + 5 * 2e-6)


def test_breakdown_missing_uses_the_total() -> None:
    assert call_cost({"input_total": 100, "output": 10}, PRICED) == pytest.approx(100 * 2e-6 + 10 * 8e-6)
    usage = {"input_total": 100, "input_uncached": None, "cache_read": 40, "output": 10}
    assert call_cost(usage, PRICED) == pytest.approx(60 * 2e-6 + 40 * 5e-7 + 10 * 8e-6)


@pytest.mark.parametrize(
    "usage",
    [
        {},
        {"input_total": None, "output": None},
        {"input_total": 100, "output": None},
        {"input_total": None, "input_uncached": None, "output": 5},
    ],
)
def test_unknown_usage_has_unknown_cost(usage: dict[str, int | None]) -> None:
    assert call_cost(usage, PRICED) is None


def test_unknown_model_has_unknown_cost() -> None:
    assert CATALOG.info("no-such-model-xyz") is None
    assert call_cost({"input_total": 1, "output": 1}, None) is None
    no_price = ModelInfo(context_window=10, max_output_tokens=1)
    assert call_cost({"input_total": 1, "output": 1}, no_price) is None


def test_zero_usage_costs_zero_not_none() -> None:
    assert call_cost({"input_total": 0, "input_uncached": 0, "cache_read": 0, "output": 0}, PRICED) == 0


def _call(id: str, **kw: object) -> CallRecord:
    fields: dict[str, object] = dict(
        id=id,
        tenant="t_a",
        route="main",
        model="gpt-4o",
        purpose="main",
        stream=False,
        started_at=100.0,
        conversation_id="c_1",
        status="complete",
    )
    fields.update(kw)
    return CallRecord(**fields)  # type: ignore[arg-type]


CALLS = [
    _call(
        "a",
        usage={
            "input_total": 1000,
            "input_uncached": 600,
            "cache_read": 400,
            "cache_write": None,
            "output": 100,
            "reasoning": 10,
        },
        cost_usd=0.0025,
        projection={"client_tokens": 1500, "sent_tokens": 1000},
    ),
    _call(
        "b",
        route="other",
        model="unknown-model",
        started_at=200.0,
        conversation_id="c_2",
        usage={
            "input_total": 50,
            "input_uncached": 20,
            "cache_read": 20,
            "cache_write": 10,
            "output": 5,
            "reasoning": None,
        },
        projection={"client_tokens": 50, "sent_tokens": 50},
    ),
    _call(
        "c",
        purpose="summary",
        started_at=300.0,
        usage={
            "input_total": 300,
            "input_uncached": 300,
            "cache_read": 0,
            "cache_write": None,
            "output": 40,
            "reasoning": None,
        },
        cost_usd=0.001,
        projection={"summarized_seqs": [1, 4]},
    ),
    _call(
        "d",
        status="error",
        started_at=400.0,
        upstream_status=429,
        usage={k: None for k in ("input_total", "input_uncached", "cache_read", "cache_write", "output", "reasoning")},
    ),
]


def test_totals_sum_known_values_and_count_unknown_ones() -> None:
    totals = summarize(cells_from_calls(CALLS, UsageQuery()), UsageQuery())["totals"]
    assert totals["calls"] == 4
    assert totals["calls_by_purpose"] == {"main": 3, "summary": 1}
    assert totals["calls_by_status"] == {"complete": 3, "error": 1}
    assert totals["input_total"] == 1350 and totals["unknown"]["input_total"] == 1
    assert totals["cache_read"] == 420
    assert totals["cache_write"] == 10 and totals["unknown"]["cache_write"] == 3
    assert totals["reasoning"] == 10 and totals["unknown"]["reasoning"] == 3
    assert totals["output"] == 145
    assert totals["cost_usd"] == pytest.approx(0.0035) and totals["unknown"]["cost_usd"] == 2
    # saved = sum over main calls of client - sent; summary calls are not "unknown" there
    assert totals["tokens_saved"] == 500 and totals["unknown"]["tokens_saved"] == 1


def test_a_field_nobody_knew_is_null_not_zero() -> None:
    only_error = [CALLS[3]]
    totals = summarize(cells_from_calls(only_error, UsageQuery()), UsageQuery())["totals"]
    assert totals["input_total"] is None and totals["unknown"]["input_total"] == 1
    assert totals["cost_usd"] is None
    empty = summarize([], UsageQuery())["totals"]
    assert empty["calls"] == 0 and empty["output"] is None and empty["unknown"]["output"] == 0


def test_a_rewritten_record_counts_once() -> None:
    again = _call("a", usage=CALLS[0].usage, cost_usd=0.0025)
    totals = summarize(cells_from_calls([*CALLS, again], UsageQuery()), UsageQuery())["totals"]
    assert totals["calls"] == 4 and totals["input_total"] == 1350


def test_filters_and_groups() -> None:
    query = UsageQuery(since=150, until=350, group_by="route")
    result = summarize(cells_from_calls(CALLS, query), query)
    assert result["totals"]["calls"] == 2
    groups = {g["key"]: g for g in result["groups"]}
    assert set(groups) == {"main", "other"}
    assert groups["main"]["calls_by_purpose"] == {"summary": 1}
    assert groups["other"]["cost_usd"] is None and groups["other"]["input_total"] == 50


async def test_sqlite_ledger_agrees_with_the_reference(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "ledger.db"))
    await store.open()
    try:
        for call in CALLS:
            await store.record_call(call)
        await store.record_call(CALLS[0])  # written again: replaces, adds nothing
        for query in (
            UsageQuery(),
            UsageQuery(group_by="route"),
            UsageQuery(group_by="conversation"),
            UsageQuery(group_by="model"),
            UsageQuery(route="main", since=100, until=301),
            UsageQuery(conversation_id="c_2"),
            UsageQuery(tenant="t_nobody"),
        ):
            expected = summarize(cells_from_calls(CALLS, query), query)
            got = summarize(await store.usage_cells(query), query)
            assert _approx(got) == _approx(expected), query
        listed = await store.list_calls("c_1", 10, 0)
        assert {c.id: c.cost_usd for c in listed} == {"a": 0.0025, "c": 0.001, "d": None}
    finally:
        await store.close()


def _approx(value: object) -> object:
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    return value


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text format 0.0.4 -> {(name, labels): value}; checks HELP/TYPE precede samples."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, rest = series.partition("{")
        labels: list[tuple[str, str]] = []
        rest = rest.rstrip("}")
        while rest:
            key, _, rest = rest.partition('="')
            chars, i = [], 0
            while rest[i] != '"':
                if rest[i] == "\\":
                    i += 1
                    chars.append({"n": "\n"}.get(rest[i], rest[i]))
                else:
                    chars.append(rest[i])
                i += 1
            labels.append((key, "".join(chars)))
            rest = rest[i + 1 :].lstrip(",")
        base = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in typed:
                base = name[: -len(suffix)]
        assert base in typed, f"sample {name} without # TYPE"
        out[(name, frozenset(labels))] = math.inf if value == "+Inf" else float(value)
    return out


def test_metrics_text_format() -> None:
    metrics = Metrics()
    weird = 'ro"ute\\\n'
    metrics.observe_call(
        _call(
            "x",
            route=weird,
            latency_ms=250.0,
            ttfb_ms=40.0,
            cost_usd=0.5,
            usage={"input_total": 10, "output": 2, "cache_read": 4},
            projection={"client_tokens": 30, "sent_tokens": 10},
        ),
        "openai_chat",
    )
    metrics.observe_call(_call("y", status="error", upstream_status=429, latency_ms=1.0), "openai_chat", "http_429")
    metrics.observe_call(_call("z", purpose="summary", usage={"input_total": 7, "output": 1}), "openai_chat")
    metrics.observe_compaction("committed")
    parsed = parse_metrics(metrics.render().decode())

    def value(name: str, **labels: str) -> float:
        return parsed[(name, frozenset(labels.items()))]

    assert value("ctxproxy_requests_total", route=weird, wire="openai_chat", status="complete") == 1
    assert value("ctxproxy_requests_total", route="main", wire="openai_chat", status="error") == 1
    assert (
        "ctxproxy_requests_total",
        frozenset({("route", "main"), ("wire", "openai_chat"), ("status", "complete")}),
    ) not in parsed  # summary: no request
    assert value("ctxproxy_upstream_errors_total", route="main", kind="http_429") == 1
    assert value("ctxproxy_tokens_total", route=weird, kind="input") == 10
    assert value("ctxproxy_tokens_total", route=weird, kind="cache_read") == 4
    assert value("ctxproxy_tokens_total", route="main", kind="input") == 7
    assert value("ctxproxy_tokens_saved_total", route=weird) == 20
    assert value("ctxproxy_cost_usd_total", route=weird) == 0.5
    assert value("ctxproxy_compactions_total", result="committed") == 1
    assert value("ctxproxy_compactions_total", result="failed") == 0
    assert value("ctxproxy_request_duration_seconds_bucket", route=weird, wire="openai_chat", le="0.25") == 1
    assert value("ctxproxy_request_duration_seconds_bucket", route=weird, wire="openai_chat", le="0.1") == 0
    assert value("ctxproxy_request_duration_seconds_bucket", route=weird, wire="openai_chat", le="+Inf") == 1
    assert value("ctxproxy_request_duration_seconds_count", route=weird, wire="openai_chat") == 1
    assert value("ctxproxy_ttfb_seconds_sum", route=weird, wire="openai_chat") == pytest.approx(0.04)


def test_saved_money_is_priced_like_the_calls_own_input() -> None:
    info = ModelInfo(
        128000, 4096, input_cost_per_token=3e-6, output_cost_per_token=15e-6, cache_read_cost_per_token=3e-7
    )
    # nothing cached: the unsent tokens at the input price
    assert saved_cost(1000, {"input_total": 500, "cache_read": 0}, info) == pytest.approx(1000 * 3e-6)
    # 80% of the input read from the cache: the unsent tokens priced with the same share
    assert saved_cost(1000, {"input_total": 500, "cache_read": 400}, info) == pytest.approx(
        1000 * (0.8 * 3e-7 + 0.2 * 3e-6)
    )
    assert saved_cost(-40, {"input_total": 500}, info) == pytest.approx(-40 * 3e-6)  # the proxy's own tools
    no_read_price = ModelInfo(1, 1, input_cost_per_token=1e-6, output_cost_per_token=1e-6)
    assert saved_cost(10, {"input_total": 10, "cache_read": 10}, no_read_price) == pytest.approx(10e-6)
    # unknown stays unknown
    assert saved_cost(None, {"input_total": 500}, info) is None
    assert saved_cost(1000, {"input_total": 500}, None) is None
    assert saved_cost(1000, {"input_total": 500}, ModelInfo(1, 1)) is None

"""The money model (`bench.money`) against bills computed by hand, and the pass-through promise:
a run that fits the window costs the same through ctxproxy as without it.

Prices used: gpt-4.1 $2.00 input / $0.50 cached / $8.00 output; Claude Sonnet 4 $3.00 input /
$3.75 cache write / $0.30 cache read / $15.00 output (per million tokens).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.bodies import VENDORED
from bench.money import PRICES, SMALL_SUMMARIZER, Request, chain, price_requests, with_summarizer_at
from bench.savings import MONEY_MODELS, money_of, requests_of
from proxy.catalog import ModelCatalog
from proxy.policy_settings import Policy
from proxy.projector import Projector
from proxy.replay import load_transcript, replay


def blocks(*tokens: int) -> tuple[tuple[int, int], ...]:
    return tuple(zip(chain(range(len(tokens))), tokens, strict=True))


FIRST = blocks(500, 700, 300)  # tools, system, user: 1,500 tokens
SECOND = blocks(500, 700, 300, 200, 250)  # + assistant, user: 1,950 tokens


def test_openai_prefix_caching_in_128_token_increments():
    bill = price_requests([Request(FIRST, (), 100), Request(SECOND, (), 100)], PRICES["gpt-4.1"])
    # second request: 1,500 shared tokens -> 11 x 128 = 1,408 cached, 542 plain
    assert (bill.uncached, bill.cache_read, bill.cache_write) == (1500 + 542, 1408, 0)
    assert bill.dollars == pytest.approx((1500 * 2 + 100 * 8 + 542 * 2 + 1408 * 0.5 + 100 * 8) / 1e6)


def test_openai_short_prompts_and_short_matches_are_not_cached():
    short = blocks(600, 200)  # 800 tokens: below 1,024, never cached
    bill = price_requests([Request(short, (), 0), Request(short, (), 0)], PRICES["gpt-4.1"])
    assert bill.cache_read == 0 and bill.uncached == 1600
    other = ((FIRST[0][0], 500), (hash("x"), 1200))  # shares only the 500 tool tokens with FIRST
    bill = price_requests([Request(FIRST, (), 0), Request(other, (), 0)], PRICES["gpt-4.1"])
    assert bill.cache_read == 0 and bill.uncached == 3200


def test_openai_gpt4o_discount_is_half():
    bill = price_requests([Request(FIRST, (), 0), Request(FIRST, (), 0)], PRICES["gpt-4o"])
    assert bill.cache_read == 1408
    assert bill.dollars == pytest.approx((1500 * 2.5 + 92 * 2.5 + 1408 * 1.25) / 1e6)


def test_anthropic_reads_previous_breakpoint_and_writes_the_rest():
    bill = price_requests([Request(FIRST, (1, 2), 100), Request(SECOND, (1, 4), 100)], PRICES["claude-sonnet-4"])
    # first: 1,500 written; second: reads 1,500 (the first's end, 2 blocks back), writes 450
    assert (bill.cache_write, bill.cache_read, bill.uncached) == (1950, 1500, 0)
    first = 1500 * 3.75 + 100 * 15
    second = 1500 * 0.30 + 450 * 3.75 + 100 * 15
    assert bill.dollars == pytest.approx((first + second) / 1e6)

    # each request's part, as `python -m bench.dearer --run` prints it
    (a, b) = bill.per_request
    assert (a.cache_read, a.cache_write, a.uncached) == (0, 1500, 0)
    assert (b.cache_read, b.cache_write, b.uncached) == (1500, 450, 0)
    assert (a.dollars, b.dollars) == (pytest.approx(first / 1e6), pytest.approx(second / 1e6))


def test_anthropic_lookback_is_20_blocks():
    long = blocks(500, 700, 300, *([10] * 25))  # 25 new blocks after FIRST's end
    bill = price_requests([Request(FIRST, (1, 2), 0), Request(long, (1, 27), 0)], PRICES["claude-sonnet-4"])
    # the end breakpoint cannot see FIRST's end (25 blocks back): only the system breakpoint hits
    assert bill.cache_read == 1200
    assert bill.cache_write == 1500 + (1750 - 1200)
    near = blocks(500, 700, 300, *([10] * 19))
    bill = price_requests([Request(FIRST, (1, 2), 0), Request(near, (1, 21), 0)], PRICES["claude-sonnet-4"])
    assert bill.cache_read == 1500 and bill.cache_write == 1500 + 190


def test_anthropic_no_breakpoint_or_short_prefix_is_plain_input():
    bill = price_requests([Request(FIRST, (), 0), Request(FIRST, (), 0)], PRICES["claude-sonnet-4"])
    assert (bill.uncached, bill.cache_read, bill.cache_write) == (3000, 0, 0)
    # a breakpoint after 500 tokens (below the 1,024 minimum) caches nothing; after it, plain input
    bill = price_requests([Request(FIRST, (0,), 0), Request(FIRST, (0,), 0)], PRICES["claude-sonnet-4"])
    assert (bill.uncached, bill.cache_read, bill.cache_write) == (3000, 0, 0)
    # a breakpoint after the system (1,200): the 300-token tail stays plain input
    bill = price_requests([Request(FIRST, (1,), 0), Request(FIRST, (1,), 0)], PRICES["claude-sonnet-4"])
    assert (bill.uncached, bill.cache_read, bill.cache_write) == (600, 1200, 1200)


def test_anthropic_cache_point_a_move_reads_through_the_point_and_writes_what_follows():
    """A trim boundary move rewrites the results after the last old one: with ctxproxy's
    breakpoint there (block 4), the move reads blocks 0-4 and writes only the rewritten rest;
    with the client's breakpoints alone (system, newest) it reads the system prompt only."""
    before = [1200, 300, 2000, 2000, 2000, 5000, 5000]  # system, objective, 3 old results, 2 recent
    old = blocks(*before)
    rewritten = zip(chain(["trimmed 5", "recent 6", "new turn"], seed=old[4][0]), [400, 5000, 3000], strict=True)
    moved = (*old[:5], *rewritten)  # result 5 turned old (trimmed), one new turn
    claude = PRICES["claude-sonnet-4"]
    with_point = price_requests([Request(old, (0, 4, 6), 0), Request(moved, (0, 5, 7), 0)], claude)
    without = price_requests([Request(old, (0, 6), 0), Request(moved, (0, 7), 0)], claude)
    assert (with_point.cache_read, with_point.cache_write) == (7500, 17500 + 8400)
    assert (without.cache_read, without.cache_write) == (1200, 17500 + 14700)
    assert with_point.dollars == pytest.approx((17500 * 3.75 + 7500 * 0.30 + 8400 * 3.75) / 1e6)
    assert without.dollars == pytest.approx((17500 * 3.75 + 1200 * 0.30 + 14700 * 3.75) / 1e6)


def test_the_benchs_breakpoints_keep_the_clients_and_the_newest_of_ctxproxys():
    """As the wire's cap (`cap_own_markers`): system and newest message are the client's, kept;
    of the summary's, the previous point's and the point's, the newest two fit the 4."""
    turn = SimpleNamespace(
        error=None, blocks=blocks(*[100] * 40), summary_at=2, point_at=30, previous_at=10, output_tokens=5
    )
    turn.summarizer_calls, turn.shared_calls, turn.shared_fallback = (), (), ()
    report = SimpleNamespace(prefix_blocks=2, turns=[turn])
    (request,) = requests_of(report, True)
    assert request.breakpoints == (1, 10, 30, 39)  # the summary's dropped
    turn.previous_at = 20  # 10 blocks back: the cache finds it from the point, no breakpoint of its own
    (request,) = requests_of(report, True)
    assert request.breakpoints == (1, 2, 30, 39)


def test_summarizer_calls_are_billed_at_the_same_model():
    bill = price_requests([Request(FIRST, (1, 2), 0, ((1000, 200),))], PRICES["claude-sonnet-4"])
    assert bill.summarizer_dollars == pytest.approx((1000 * 3 + 200 * 15) / 1e6)
    assert bill.dollars == pytest.approx((1500 * 3.75) / 1e6 + bill.summarizer_dollars)
    assert bill.per_request[0].summarizer_dollars == pytest.approx(bill.summarizer_dollars)


def test_a_shared_summary_reads_the_request_it_repeats_from_the_cache():
    """`summarizer.mode: shared`: the call repeats an earlier request, its breakpoints unmoved, plus
    the ask: Anthropic reads that request from the cache (0.1x); the ask is plain input."""
    ask = Request((*FIRST, (hash("ask"), 400)), (1, 2), 200)
    requests = [Request(FIRST, (1, 2), 50), Request(SECOND, (1, 4), 50, shared=(ask,))]
    bill = price_requests(requests, PRICES["claude-sonnet-4"])
    assert bill.shared_dollars == pytest.approx((1500 * 0.30 + 400 * 3 + 200 * 15) / 1e6)
    assert bill.summarizer_dollars == pytest.approx(bill.shared_dollars)
    plain = price_requests([requests[0], Request(SECOND, (1, 4), 50, ((1900, 200),))], PRICES["claude-sonnet-4"])
    output = 200 * 15 / 1e6
    assert plain.summarizer_dollars - output > 3 * (bill.shared_dollars - output)  # its input, all plain
    # a small summarizer model cannot take a shared call: it reads the conversation model's cache
    assert with_summarizer_at(bill, PRICES["claude-haiku-4.5"]) == pytest.approx(bill.dollars)


def test_a_small_summarizer_reprices_only_the_summarizer_calls():
    requests = [Request(FIRST, (1, 2), 100, ((1000, 200),)), Request(FIRST, (1, 2), 50)]
    bill = price_requests(requests, PRICES["claude-sonnet-4"])
    agent_only = bill.dollars - bill.summarizer_dollars
    small = with_summarizer_at(bill, PRICES["claude-haiku-4.5"])
    assert small == pytest.approx(agent_only + (1000 * 1 + 200 * 5) / 1e6)
    assert with_summarizer_at(price_requests(requests[1:], PRICES["gpt-4.1"]), PRICES["gpt-4.1-mini"]) == pytest.approx(
        price_requests(requests[1:], PRICES["gpt-4.1"]).dollars
    )  # no summarizer call: nothing to reprice


@pytest.mark.parametrize("name", ["swe-agent__ctf__crypto__katy.json", "swe-agent__pydicom__pydicom-1458.json"])
def test_a_run_that_fits_the_window_costs_the_same_with_ctxproxy(name):
    messages, tools, _ = load_transcript(str(VENDORED / name))
    report = replay(messages, tools, Policy(context_window=200_000), "gpt-4o", Projector(ModelCatalog()))
    money = money_of(report)
    assert money["baseline_over_from"] is None
    for model in ("gpt-4.1", "claude-sonnet-4"):
        assert money[model]["with"]["dollars"] == pytest.approx(money[model]["without"]["dollars"]), model
        assert money[model]["with"]["dollars"] > 0


def test_the_bill_with_ctxproxy_is_the_defaults_and_text_mode_a_variant():
    """`summarizer.mode: auto`, the default, is `shared` where the policy names no summarizer
    model (the bench's): `with` prices each compaction the run could share as one call that
    repeats a request already cached; `with_text` as ctxproxy's own summarizer requests; the
    small model reprices text mode's calls (a route that names one runs in text mode)."""
    messages, tools, _ = load_transcript(str(VENDORED / "swe-agent__ctf__crypto__katy.json"))
    report = replay(messages, tools, Policy(context_window=8000), "gpt-4o", Projector(ModelCatalog()))
    assert any(t.shared_calls for t in report.turns)  # a compaction that could be shared
    money = money_of(report)
    for model in MONEY_MODELS:
        auto = price_requests(requests_of(report, True, shared=True), PRICES[model])
        text = price_requests(requests_of(report, True), PRICES[model])
        bills = money[model]
        assert bills["with"]["dollars"] == pytest.approx(auto.dollars, abs=1e-6), model
        assert bills["with"]["shared_dollars"] > 0, model
        assert bills["with_text"]["dollars"] == pytest.approx(text.dollars, abs=1e-6), model
        assert bills["with_text"]["shared_dollars"] == 0, model
        small = with_summarizer_at(text, PRICES[SMALL_SUMMARIZER[model]])
        assert bills["with_small_summarizer"] == pytest.approx(small, abs=1e-6), model
    claude = money["claude-sonnet-4"]
    assert claude["with"]["dollars"] < claude["with_text"]["dollars"]  # the history read from the cache

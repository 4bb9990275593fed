"""The inspector (/ui/) in a real headless browser: Debian's chromium driven by playwright, against
a real proxy serving real conversations that were trimmed, summarized and pruned
(`tests/support/inspector.py`). The browser logs in through the form and reads the pages; every
number checked is compared with the admin API's JSON. Every request the browser makes is logged:
none may leave the proxy, and no page may raise a script error or a CSP violation. Full-page
screenshots go to $CTXPROXY_UI_SCREENSHOTS (default: pytest's temp dir).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from playwright.sync_api import expect

from tests.support.inspector import (
    MODEL,
    OBJECTIVE,
    RECALL_QUERY,
    UI_TENANT,
    Browser,
    Scenario,
    last_call,
    respond,
    running_scenario,
    usage_of,
    values,
)
from tests.support.proxy_process import ADMIN_TOKEN
from tests.support.upstream_server import UpstreamServer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def scenario(
    upstream_server: UpstreamServer, closed_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    with running_scenario(upstream_server, closed_port, tmp_path_factory.getbasetemp()) as world:
        yield world


@pytest.fixture(scope="module")
def browser(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    shots = Path(os.environ.get("CTXPROXY_UI_SCREENSHOTS") or tmp_path_factory.mktemp("ui-screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    b = Browser(scenario.p.url, shots)
    yield b
    b.close()


@pytest.fixture
def clean(browser: Browser) -> Iterator[Browser]:
    """The browser; after the test: no request left the proxy, no script error, no CSP violation."""
    browser.requests.clear()
    browser.errors.clear()
    yield browser
    foreign = [url for url in browser.requests if not url.startswith(browser.base + "/")]
    assert browser.requests, "the browser made no request at all"
    assert not foreign, f"requests outside the proxy: {foreign}"
    assert not browser.errors, browser.errors


# ---- the tests ---------------------------------------------------------------------------------


def test_login_form_sets_a_strict_http_only_signed_cookie(scenario: Scenario, clean: Browser) -> None:
    context = clean.context()
    page = clean.page(context)
    page.goto(f"{clean.base}/ui/conversations/{scenario.demo}")
    assert page.url == f"{clean.base}/ui/login", "without credentials the page must send to the login form"
    assert scenario.demo not in page.content() and "LOG-" not in page.content()
    clean.shot(page, "login")
    page.fill("#token", "not-the-token")
    page.click("form.login button")
    assert "not the admin token" in page.content()
    assert context.cookies() == []
    assert [e for e in clean.errors if "401" in e], "the refused login answers 401"
    clean.errors.clear()
    page.fill("#token", ADMIN_TOKEN)
    page.click("form.login button")
    page.wait_for_url(f"{clean.base}/ui/")
    assert ADMIN_TOKEN not in page.url and all(ADMIN_TOKEN not in url for url in clean.requests)
    (cookie,) = context.cookies()
    assert cookie["name"] == "ctxproxy_ui"
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert cookie["secure"] is False  # plain http here; test_ui_access checks Secure behind HTTPS
    assert time.time() + 11 * 3600 < cookie["expires"] <= time.time() + 12 * 3600 + 5
    assert ADMIN_TOKEN not in cookie["value"]
    assert page.evaluate("document.cookie") == "", "the session cookie must not be readable by scripts"
    context.close()


def test_list_shows_each_conversation_with_the_ledgers_numbers(scenario: Scenario, clean: Browser) -> None:
    context, page = clean.login(viewport={"width": 1280, "height": 900})
    for conversation in (scenario.demo, scenario.pruned):
        row = f'#conversations tr[data-conversation="{conversation}"]'
        shown = values(page, row)
        totals = usage_of(scenario, conversation)
        assert shown["input_total"] == totals["input_total"] and shown["output"] == totals["output"]
        assert shown["cost_usd"] == totals["cost_usd"] and shown["tokens_saved"] == totals["tokens_saved"]
        assert shown["turns"] == totals["calls_by_purpose"]["main"]
        assert shown["branches"] == len(scenario.admin(f"conversations/{conversation}")["branches"])
        assert shown["cached_share"] == (
            totals["cache_read"] / totals["input_total"] if totals["cache_read"] is not None else None
        )
    demo = scenario.admin(f"conversations/{scenario.demo}")
    assert page.locator(f'tr[data-conversation="{scenario.demo}"] a.open').inner_text() == demo["external_id"]
    assert shown["tokens_saved"] > 0, "the pruned conversation's calls sent less than the client did"
    assert shown["cost_usd"] > 0 and 0 < shown["cached_share"] < 1
    clean.shot(page, "conversations")
    # search by the client's id, then by text (the history search)
    page.fill('input[name="q"]', demo["external_id"][-6:])
    page.click("form.search button")
    assert page.locator("#conversations tbody tr").count() == 1
    page.goto(f"{clean.base}/ui/?text=" + "LOG-3")
    rows = page.locator("#conversations tbody tr")
    assert rows.count() == 1 and rows.first.get_attribute("data-conversation") == scenario.demo
    assert "LOG-3" in rows.first.locator("ul.hits").inner_text()
    # paging: one per page
    page.goto(f"{clean.base}/ui/?limit=1")
    first = page.locator("#conversations tbody tr").first.get_attribute("data-conversation")
    page.click("a[rel=next]")
    assert page.locator("#conversations tbody tr").first.get_attribute("data-conversation") != first
    context.close()


def test_a_conversation_page_has_the_admin_apis_totals_checkpoints_and_calls(
    scenario: Scenario, clean: Browser
) -> None:
    context, page = clean.login(viewport={"width": 1280, "height": 900})
    page.click(f'tr[data-conversation="{scenario.demo}"] a.open')
    page.wait_for_url(f"{clean.base}/ui/conversations/{scenario.demo}")
    shown = values(page, "#totals")
    totals = usage_of(scenario, scenario.demo)
    for name in ("calls", "input_total", "cache_read", "output", "tokens_saved", "cost_usd"):
        assert shown[name] == totals[name], name
    checkpoints = scenario.admin(f"conversations/{scenario.demo}/checkpoints")["data"]
    rows = page.locator("#checkpoints tbody tr")
    assert rows.count() == len(checkpoints)
    for c in checkpoints:
        got = values(page, f'#checkpoints tr[data-checkpoint="{c["id"]}"]')
        assert (got["generation"], got["from_seq"], got["covered_through_seq"]) == (
            c["generation"],
            c["from_seq"],
            c["covered_through_seq"],
        )
        assert (
            page.locator(f'#checkpoints tr[data-checkpoint="{c["id"]}"] [data-field=status]').inner_text()
            == c["status"]
        )
    assert page.locator("#checkpoint-section svg rect.cp.active").count() >= 1
    calls = scenario.admin(f"conversations/{scenario.demo}/calls?limit=1000")["data"]
    assert page.locator("#calls tbody tr").count() == min(len(calls), 100)
    by_id = {c["id"]: c for c in calls}
    for i in range(page.locator("#calls tbody tr").count()):
        row = page.locator("#calls tbody tr").nth(i)
        call = by_id[row.get_attribute("data-call")]
        got = values(page, f'#calls tr[data-call="{call["id"]}"]')
        assert got["cost_usd"] == call["cost_usd"] and got["input_total"] == call["usage"]["input_total"]
        assert got["latency_ms"] == call["latency_ms"] and got["ttfb_ms"] == call["ttfb_ms"]
        assert row.get_attribute("data-purpose") == call["purpose"]
    assert page.locator('#calls tr[data-purpose="summary"]').count() >= 1
    assert page.locator("#charts svg").count() == 3
    assert page.locator("#branches li[data-branch]").count() == len(
        scenario.admin(f"conversations/{scenario.demo}")["branches"]
    )
    clean.shot(page, "conversation")
    # the pruned conversation: its checkpoints failed, with the summarizer's error
    page.goto(f"{clean.base}/ui/conversations/{scenario.pruned}")
    failed = page.locator("#checkpoints tr.failed")
    assert failed.count() >= 1 and "summarizer answered 500" in failed.first.locator("td.error").inner_text()
    page.set_viewport_size({"width": 390, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), "overflows a narrow screen"
    clean.shot(page, "conversation-narrow")
    context.close()


def test_the_diff_marks_trims_the_summary_pins_and_pruned_groups(scenario: Scenario, clean: Browser) -> None:
    call = last_call(scenario, scenario.demo, lambda p: p["checkpoint_generation"] and p["trimmed"])
    record = call["projection"]
    context, page = clean.login(viewport={"width": 1280, "height": 900})
    page.goto(f"{clean.base}/ui/conversations/{scenario.demo}")
    page.click(f'#calls tr[data-call="{call["id"]}"] a.diff')
    page.wait_for_url(f"**/calls/{call['id']}")
    assert page.locator("#verified.ok").count() == 1
    trimmed = page.locator('#diff tr[data-form="trimmed"]')
    assert trimmed.count() == record["trimmed"]
    row = trimmed.first
    original, sent = row.locator("td").nth(2).inner_text(), row.locator("td").nth(3).inner_text()
    assert "line 39 of log" in original, "the client's side shows the whole result"
    seq = int(row.get_attribute("data-seq"))
    assert f"event {seq}" in sent and re.search(r"\[trimmed: [^\]\n]* of bash, ", sent), sent
    assert re.search(r"\[trimmed: [^\]\n]* of bash, ", row.locator("td").nth(3).locator("mark").first.inner_text()), (
        "the marker is marked"
    )
    assert "line 39 of log" in sent.split("[trimmed")[-1] or len(sent) < len(original)
    summary = page.locator('#diff tr[data-form="summary"]')
    assert summary.count() == 1 and "<conversation_summary" in summary.inner_text()
    assert "Ship the billing migration." in summary.inner_text()
    pinned = page.locator('#diff tr[data-form="pinned"]')
    assert pinned.count() == len(record["pinned_seqs"]) and OBJECTIVE["content"] in pinned.first.inner_text()
    summarized = page.locator('#diff tr[data-form="summarized"]').count()
    assert summarized == record["covered_through_seq"] - len(record["pinned_seqs"])
    assert values(page, "#call-facts")["sent_tokens"] == record["sent_tokens"]
    clean.shot(page, "diff")
    page.evaluate("document.querySelector('#diff tr[data-form=summary]').scrollIntoView()")
    clean.shot(page, "diff-view", full_page=False)
    # every marked event links to the stored event
    row.locator("a.event").click()
    page.wait_for_url(f"**/events?**#e{seq}")
    assert "line 39 of log" in page.locator(f"#e{seq}").inner_text()
    # the pruned conversation: dropped groups are marked, as many as the record says
    call = last_call(scenario, scenario.pruned, lambda p: p["pruned_seqs"])
    page.goto(f"{clean.base}/ui/conversations/{scenario.pruned}/calls/{call['id']}")
    pruned = page.locator('#diff tr[data-form="pruned"]')
    expected = sum(end - start + 1 for start, end in call["projection"]["pruned_seqs"])
    assert pruned.count() == expected and "pruned" in pruned.first.locator("td").nth(3).inner_text()
    clean.shot(page, "diff-pruned")
    context.close()


def test_a_trimmed_results_elided_parts_show_on_demand(scenario: Scenario, clean: Browser) -> None:
    call = last_call(scenario, scenario.demo, lambda p: p["trimmed"])
    context, page = clean.login(viewport={"width": 1280, "height": 900})
    page.goto(f"{clean.base}/ui/conversations/{scenario.demo}/calls/{call['id']}")
    row = page.locator('#diff tr[data-form="trimmed"]').first
    seq = int(row.get_attribute("data-seq") or "0")
    details = row.locator("details.elided")
    pre = details.locator("pre.original")
    assert details.count() == 1 and pre.text_content() == "", "nothing is loaded before it is asked for"
    loads = len([url for url in clean.requests if "/elided/" in url])
    assert loads == 0
    details.locator("summary").click()
    expect(details).to_have_attribute("data-loaded", "done")
    page_events = scenario.admin(
        f"conversations/{scenario.demo}/events?branch={call['branch_id']}&after={seq - 1}&limit=1"
    )
    stored = page_events["data"][0]["message"]["content"]
    assert pre.text_content() == stored, "the stored original, byte for byte"
    sent = row.locator("td").nth(3).locator("pre").first.inner_text()
    elided = pre.locator("mark.elided").all_text_contents()
    assert elided and all(part not in sent for part in elided if len(part) > 40)
    assert "line 20 of log" in "".join(elided) and "line 20 of log" not in sent, "the middle the model did not see"
    assert [url for url in clean.requests if "/elided/" in url] == [
        f"{clean.base}/ui/api/conversations/{scenario.demo}/calls/{call['id']}/elided/{seq}"
    ]
    details.locator("summary").click()
    details.locator("summary").click()  # closed and opened again: loaded once
    assert len([url for url in clean.requests if "/elided/" in url]) == 1
    clean.shot(page, "diff-elided")
    # a row that was not trimmed in the call: the API's own 404
    answer = page.request.get(f"{clean.base}/ui/api/conversations/{scenario.demo}/calls/{call['id']}/elided/1")
    assert answer.status == 404 and "was not trimmed" in answer.json()["error"]["message"]
    context.close()


def test_where_the_tokens_went_ranks_events_by_what_they_cost_upstream(scenario: Scenario, clean: Browser) -> None:
    context, page = clean.login(viewport={"width": 1280, "height": 900})
    page.goto(f"{clean.base}/ui/conversations/{scenario.demo}")
    page.click("text=Where the tokens went")
    rows = page.locator("#consumers tbody tr")
    sent = [
        values(page, f"#consumers tbody tr:nth-child({i + 1})")["sent_tokens"] for i in range(min(rows.count(), 20))
    ]
    assert sent == sorted(sent, reverse=True) and sent[0] > 0
    calls = scenario.admin(f"conversations/{scenario.demo}/calls?limit=1000")["data"]
    projected = [c for c in calls if c["purpose"] == "main" and c["projection"]]
    # the objective (event 1) is sent in every call: raw before the summary, pinned after it
    objective = values(page, '#consumers tr[data-seq="1"]')
    assert objective["calls"] == len(projected)
    forms = page.locator('#consumers tr[data-seq="1"] [data-field=forms]').inner_text()
    assert "pinned" in forms and "raw" in forms
    # a log read early was sent raw, then trimmed, then summarized
    early = page.locator('#consumers tr[data-seq="4"] [data-field=forms]').inner_text()
    assert "raw" in early and "trimmed" in early and "summarized" in early, early
    # what every call carries besides the events: the system prefix, the tool definitions, the summary
    for kind in ("system prefix", "tool definitions", "summary block"):
        shared = values(page, f'#consumers tr[data-kind="{kind}"]')
        assert shared["sent_tokens"] > 0 and shared["cost_usd"] > 0, kind
    assert values(page, '#consumers tr[data-kind="system prefix"]')["calls"] == len(projected)
    # each event once, with the branch it belongs to
    keys = [
        (row.get_attribute("data-branch"), row.get_attribute("data-seq"))
        for row in page.locator("#consumers tbody tr[data-seq]").all()
    ]
    assert len(keys) == len(set(keys))
    assert page.locator('#consumers tr[data-seq="1"] [data-field=branch]').inner_text() == "root"
    assert "Branch" in page.locator("#consumers thead").inner_text()
    clean.shot(page, "tokens")
    context.close()


def test_usage_charts_are_labelled_and_an_unknown_cost_is_not_drawn_as_zero(scenario: Scenario, clean: Browser) -> None:
    unpriced = "gpt-unpriced-ui-model"
    client = scenario.p.client(f"sk-ui-unpriced-{uuid.uuid4().hex}")
    history = [{"role": "user", "content": "a model without a price"}]
    raw = client.chat.completions.with_raw_response.create(model=unpriced, messages=history)
    history += [raw.parse().choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "again"}]
    client.chat.completions.create(model=unpriced, messages=history)
    conversation = raw.headers["x-conversation-id"]
    scenario.p.wait_calls(conversation, 2)
    context, page = clean.login(viewport={"width": 1280, "height": 900})
    page.goto(f"{clean.base}/ui/usage?group_by=model")
    ledger = {g["key"]: g for g in scenario.admin("usage?group_by=model")["groups"]}
    assert ledger[unpriced]["cost_usd"] is None
    tokens_chart, cost_chart = page.locator("svg.chart").all()[:2]
    for chart, unit in ((tokens_chart, "tokens"), (cost_chart, "USD")):
        labels = [t.text_content() for t in chart.locator("text.label > title").all()]
        assert labels == list(ledger), labels  # every group named under its bars
        assert chart.locator("text.axis-title").text_content() == unit
    legend = page.locator("ul.legend").nth(1).inner_text()
    assert "cost USD" in legend and "unknown" in legend
    unknown = cost_chart.locator("text.unknown > title").all_text_contents()
    assert unknown == [f"{unpriced}: cost USD unknown"], unknown  # a mark saying so, not a zero bar
    assert cost_chart.locator("rect").count() == len(ledger) - 1
    assert values(page, f'#usage tr[data-key="{unpriced}"]')["cost_usd"] is None
    assert page.locator(f'#usage tr[data-key="{unpriced}"] [data-field=cost_usd]').inner_text() == "—"
    clean.shot(page, "usage-by-model")
    # the conversation's cumulative cost says which calls it could not count; its tokens' cost share is unknown
    page.goto(f"{clean.base}/ui/conversations/{conversation}")
    assert page.locator("#charts circle.unknown").count() == 2
    page.goto(f"{clean.base}/ui/conversations/{conversation}/tokens")
    shares = page.locator("#consumers [data-field=cost_usd]").all()
    assert shares and all(s.inner_text() == "—" for s in shares)
    context.close()


def test_usage_by_route_matches_the_ledger(scenario: Scenario, clean: Browser) -> None:
    context, page = clean.login(viewport={"width": 1280, "height": 900})
    page.click("text=Usage")
    page.select_option('select[name="group_by"]', "route")
    page.click("form.search button")
    ledger = scenario.admin("usage?group_by=route")
    for group in ledger["groups"]:
        got = values(page, f'#usage tr[data-key="{group["key"]}"]')
        assert got["calls"] == group["calls"] and got["input_total"] == group["input_total"], group["key"]
        assert got["cost_usd"] == group["cost_usd"]
    assert values(page, '#usage tr[data-key="total"]')["calls"] == ledger["totals"]["calls"]
    assert page.locator("svg.chart").count() == 2
    clean.shot(page, "usage")
    context.close()


def test_a_running_conversation_updates_without_a_reload(
    scenario: Scenario, clean: Browser, upstream_server: UpstreamServer
) -> None:
    context, page = clean.login()
    page.goto(f"{clean.base}/ui/conversations/{scenario.demo}?calls=0")
    page.evaluate("window.__notReloaded = true")
    before = int(page.locator("#calls-section h2").inner_text().split("(")[1].rstrip(")"))
    external = scenario.admin(f"conversations/{scenario.demo}")["external_id"]
    upstream_server.responder = respond
    client = scenario.p.client(scenario.api_key)
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "a side question"}],
        extra_headers={"X-Conversation-Id": external},
    )
    expect(page.locator("#calls-section h2")).to_contain_text(f"({before + 1})", timeout=15_000)
    assert page.evaluate("window.__notReloaded") is True
    context.close()


def test_keyboard_search_and_row_navigation(scenario: Scenario, clean: Browser) -> None:
    context, page = clean.login()
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.name") == "q"
    page.keyboard.press("Escape")
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("j")
    focused = page.evaluate("document.activeElement.getAttribute('href')")
    assert focused and focused.startswith("/ui/conversations/")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{clean.base}{focused}")
    context.close()


def test_download_replay_command_and_delete_with_confirmation(scenario: Scenario, clean: Browser) -> None:
    external = f"ui-throwaway-{uuid.uuid4().hex[:6]}"
    client = scenario.p.client(scenario.api_key)
    client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Conversation-Id": external}
    )
    conversation = scenario.admin("conversations?limit=1")["data"][0]["id"]
    context, page = clean.login()
    page.goto(f"{clean.base}/ui/conversations/{conversation}")
    command = page.input_value("#replay")
    assert "ctxproxy replay" in command and f"/ui/conversations/{conversation}/export.json" in command
    assert ADMIN_TOKEN not in command
    with page.expect_download() as download:
        page.click("text=Download JSON")
    exported = json.loads(Path(download.value.path()).read_text())
    assert exported["messages"][-2:] == [{"role": "user", "content": "hi"}, exported["messages"][-1]]
    assert [c["id"] for c in exported["calls"]] == [
        c["id"] for c in scenario.admin(f"conversations/{conversation}/calls")["data"]
    ]
    page.click("text=Delete…")
    assert "cannot be undone" in page.content()
    clean.shot(page, "delete-confirm")
    page.click("button.danger")
    page.wait_for_url(f"{clean.base}/ui/")
    assert scenario.p.admin(f"conversations/{conversation}").status_code == 404
    context.close()


def test_bearer_token_opens_every_page_for_scripts(scenario: Scenario) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    call = last_call(scenario, scenario.demo, lambda p: True)
    for path in (
        "/ui/",
        f"/ui/conversations/{scenario.demo}",
        f"/ui/conversations/{scenario.demo}/calls/{call['id']}",
        f"/ui/conversations/{scenario.demo}/tokens",
        f"/ui/conversations/{scenario.demo}/events",
        "/ui/usage",
    ):
        r = httpx.get(scenario.p.url + path, headers=headers, timeout=30)
        assert r.status_code == 200 and "default-src 'none'" in r.headers["content-security-policy"], path
    listed = httpx.get(f"{scenario.p.url}/ui/api/conversations", headers=headers).json()["data"]
    demo = next(r for r in listed if r["id"] == scenario.demo)
    assert demo["cost_usd"] == usage_of(scenario, scenario.demo)["cost_usd"]


def test_recall_detours_show_their_query_and_the_events_it_found(scenario: Scenario, clean: Browser) -> None:
    calls = scenario.admin(f"conversations/{scenario.demo}/calls?limit=1000")["data"]
    detours = [c for c in calls if c["purpose"] == "recall"]
    assert len(detours) == 1
    context, page = clean.login()
    page.goto(f"{clean.base}/ui/conversations/{scenario.demo}")
    item = page.locator(f'#recall li[data-call="{detours[0]["id"]}"]')
    assert f"“{RECALL_QUERY}”" in item.inner_text() or RECALL_QUERY in item.locator("q").inner_text()
    found = item.locator("a.event")
    assert found.count() >= 1
    found.first.click()
    seq = page.url.rsplit("#e", 1)[1]
    assert RECALL_QUERY in page.locator(f"#e{seq}").inner_text()
    context.close()


def test_the_keys_page_shows_each_keys_limits_and_what_the_period_used(scenario: Scenario, clean: Browser) -> None:
    quota = {"tokens_per_day": 1_000_000, "requests_per_minute": 100}
    made = scenario.p.admin("keys", "POST", json={"name": "ui-bot", "tenant": UI_TENANT, "quota": quota}).json()
    raw = scenario.p.client(made["key"]).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "a call made with an API key"}]
    )
    scenario.p.wait_calls(raw.headers["x-conversation-id"], 1)
    listed = {k["id"]: k for k in scenario.admin("keys")["data"]}[made["id"]]
    context, page = clean.login(viewport={"width": 1280, "height": 900})
    page.click("text=Keys")
    expect(page.locator("h1")).to_contain_text("Keys and limits")
    headers = page.locator("#keys th").all_inner_texts()
    expected = ["Key", "Source", "Tenant", "Routes", "Expires", "Limits: used this period", "Usage", "Revoke"]
    assert headers == expected, headers
    row = page.locator(f'#keys tr[data-key="{made["id"]}"]')
    expect(row).to_contain_text("ui-bot")
    expect(row).to_contain_text(UI_TENANT)
    expect(row).to_contain_text("…" + made["hint"])
    tokens = row.locator('li[data-limit="tokens-day"]').inner_text()
    used = next(s for s in listed["standing"] if s["quantity"] == "tokens")["used"]
    assert used > 0 and tokens.startswith(f"{used:,.0f} of 1,000,000 tokens per day"), tokens
    assert "resets" in tokens and row.locator("meter").count() == 2
    tenant = page.locator(f'#tenants tr[data-tenant="{UI_TENANT}"]')
    expect(tenant).to_contain_text("of 10,000,000 tokens per month")
    expect(tenant).to_contain_text("of 1,000 requests per minute")
    clean.shot(page, "keys")
    # usage by client key, with what the rewriting saved in tokens and money
    row.locator("text=usage by key").click()
    ledger = {g["key"]: g for g in scenario.admin("usage?group_by=client")["groups"]}
    got = values(page, f'#usage tr[data-key="{made["id"]}"]')
    assert got["calls"] == ledger[made["id"]]["calls"] == 1 and got["input_total"] == ledger[made["id"]]["input_total"]
    assert "saved_usd" in got and got["saved_usd"] == ledger[made["id"]]["saved_usd"]
    assert page.locator("#usage th").all_inner_texts()[5:7] == ["Saved tokens", "Saved $"]
    # revoked from the page: gone from the list, and the key is refused at once
    page.click("text=Keys")
    page.locator(f'#keys tr[data-key="{made["id"]}"] button:has-text("Revoke")').click()
    expect(page.locator(f'#keys tr[data-key="{made["id"]}"]')).to_have_count(0)
    with pytest.raises(openai.AuthenticationError):
        scenario.p.client(made["key"]).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    context.close()

"""The inspector (/ui/) in a real headless browser: Debian's chromium driven by playwright.

One private proxy (own SQLite file) serves two real conversations driven by the openai SDK
against the scripted upstream at a 6,000-token window:
- `demo`: an agent session with an explicit `X-Conversation-Id`, tool results big enough to be
  trimmed, and a summarizer that works, so later calls send the summary block;
- `pruned`: a session on a policy with `on_overflow: prune` whose summarizer always fails, so
  its checkpoints are failed ones and its calls drop old groups whole.

Then the browser logs in through the form and reads the pages; every number checked is compared
with the admin API's JSON. Every request the browser makes is logged: none may leave the proxy.
Full-page screenshots go to $CTXPROXY_UI_SCREENSHOTS (default: pytest's temp dir).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.support.proxy_process import ADMIN_TOKEN, ProxyProcess, default_config, subprocess_env
from tests.support.upstream_server import Reply, UpstreamServer, tool_call
from tests.support.waiting import wait_until

MODEL = "gpt-4.1-nano"  # models with litellm prices, so every call has a cost
PRUNE_MODEL = "gpt-4.1-mini-2025-04-14"
WINDOW = 6000
POLICY = {
    "context_window": WINDOW,
    "max_output_tokens": 500,
    "keep_recent_tokens": 1500,
    "summary_chunk_tokens": 2000,
    "overflow_wait": 20,
    "summarizer": {"timeout": 5, "max_attempts": 2},
    "tool_results": {"keep_recent_groups": 2, "old_max_chars": 300, "clear_at_least": 1},
}
SUMMARY = (
    "## Goal\nShip the billing migration.\n## Constraints\nnone\n## Decisions\nnone\n## Key facts\nnone\n"
    "## Failed attempts\nnone\n## Open questions\nnone\n## Next step\nContinue."
)
SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
OBJECTIVE = {"role": "user", "content": "Objective: migrate billing to the new queue."}


def is_summary_request(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    return bool(messages) and str(messages[0].get("content", "")).startswith("You compress the history")


def respond(body: dict[str, Any]) -> Reply:
    model = body.get("model")
    if is_summary_request(body):
        return Reply(status=500) if model == PRUNE_MODEL else Reply(content=SUMMARY)
    last = (body.get("messages") or [{}])[-1]
    if model == MODEL and last.get("role") == "user":
        n = len(body["messages"])
        call = tool_call("bash", {"command": f"cat log_{n}.txt"}, id=f"call_{n}")
        return Reply(content=None, tool_calls=[call], cached_tokens=64)
    return Reply(content=f"done with {str(last.get('content', ''))[:20]}", cached_tokens=64)


class Demo:
    """The demo agent session: one user turn = a tool call, its result, the answer."""

    def __init__(self, p: ProxyProcess, api_key: str, conversation: str) -> None:
        self.client = p.client(api_key)
        self.headers = {"X-Conversation-Id": conversation}
        self.messages: list[dict[str, Any]] = [SYSTEM, OBJECTIVE]
        self.turns = 0

    def turn(self) -> None:
        i = self.turns
        self.turns += 1
        self.messages.append({"role": "user", "content": f"step {i}: read the next log file. " + "context " * 150})
        answer = self.client.chat.completions.create(model=MODEL, messages=self.messages, extra_headers=self.headers)
        message = answer.choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            output = f"LOG-{i} " + "\n".join(f"line {k} of log {i}: status ok, latency {k * 7} ms" for k in range(40))
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        answer = self.client.chat.completions.create(model=MODEL, messages=self.messages, extra_headers=self.headers)
        self.messages.append(answer.choices[0].message.model_dump(exclude_none=True))


def drive_pruned(p: ProxyProcess, api_key: str) -> str:
    """Long user notes until the failing summarizer left a failed checkpoint and a call pruned."""
    client = p.client(api_key)
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Objective: keep notes."}]
    conversation = ""

    def done() -> bool:
        failed = [
            c for c in p.admin_json(f"conversations/{conversation}/checkpoints")["data"] if c["status"] == "failed"
        ]
        calls = p.admin_json(f"conversations/{conversation}/calls?limit=1000")["data"]
        return bool(failed) and any((c["projection"] or {}).get("pruned_seqs") for c in calls)

    for i in range(40):
        messages.append({"role": "user", "content": f"note {i}: " + "remember this detail " * 120})
        raw = client.chat.completions.with_raw_response.create(model=PRUNE_MODEL, messages=messages)
        conversation = raw.headers["x-conversation-id"]
        messages.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        if i > 3 and done():
            break
    wait_until(done, timeout=10, what="a failed checkpoint and a pruned call")
    return conversation


class Scenario:
    def __init__(self, p: ProxyProcess, demo: str, pruned: str, api_key: str) -> None:
        self.p = p
        self.demo = demo  # the proxy's id of the demo conversation
        self.pruned = pruned
        self.api_key = api_key

    def admin(self, path: str) -> Any:
        return self.p.admin_json(path)


@pytest.fixture(scope="module")
def scenario(
    upstream_server: UpstreamServer, closed_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    config = default_config(upstream_server.base_url, closed_port)
    route = json.loads(json.dumps(config["routes"][0]))
    route.update(name="ui-prune", match={"model": PRUNE_MODEL}, policy="prune")
    config["routes"].insert(0, route)
    config["policies"] = {"default": POLICY, "prune": {**POLICY, "on_overflow": "prune"}}
    workdir = Path(tempfile.mkdtemp(prefix="proxy-ui-", dir=tmp_path_factory.getbasetemp()))
    p = ProxyProcess(config, workdir, subprocess_env()).start()
    upstream_server.context_windows[MODEL] = WINDOW
    upstream_server.context_windows[PRUNE_MODEL] = WINDOW
    upstream_server.responder = respond
    try:
        api_key = f"sk-ui-{uuid.uuid4().hex}"
        external = f"ui-demo-{uuid.uuid4().hex[:8]}"
        session = Demo(p, api_key, external)
        session.turn()
        demo = p.admin_json("conversations?limit=10")["data"][0]["id"]

        def active() -> list[dict[str, Any]]:
            return [c for c in p.admin_json(f"conversations/{demo}/checkpoints")["data"] if c["status"] == "active"]

        while not active() and session.turns < 40:
            session.turn()
        wait_until(active, timeout=30, what="an active checkpoint of the demo conversation")
        for _ in range(4):
            session.turn()  # these calls send the summary block
        pruned = drive_pruned(p, api_key)
        yield Scenario(p, demo, pruned, api_key)
    finally:
        upstream_server.responder = None
        upstream_server.context_windows.pop(MODEL, None)
        upstream_server.context_windows.pop(PRUNE_MODEL, None)
        p.stop()


# ---- the browser -------------------------------------------------------------------------------


class Browser:
    """One chromium for the module; every page it opens logs its requests and errors."""

    def __init__(self, base: str, shots: Path) -> None:

        executable = shutil.which("chromium")
        if executable is None:
            pytest.fail(
                "Debian's chromium is not installed: README's test command installs it (apt-get install chromium)"
            )
        self.base = base
        self.shots = shots
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.engine = sync_playwright().start()
        self.browser = self.engine.chromium.launch(executable_path=executable, args=["--no-sandbox"])

    def context(self, **kw: Any) -> Any:
        context = self.browser.new_context(**kw)
        context.set_default_timeout(10_000)
        context.on("request", lambda request: self.requests.append(request.url))
        return context

    def page(self, context: Any) -> Any:
        page = context.new_page()
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        return page

    def login(self, **kw: Any) -> tuple[Any, Any]:
        context = self.context(**kw)
        page = self.page(context)
        page.goto(f"{self.base}/ui/")
        page.fill("#token", ADMIN_TOKEN)
        page.click("form.login button")
        page.wait_for_url(f"{self.base}/ui/")
        return context, page

    def shot(self, page: Any, name: str, full_page: bool = True) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=full_page)

    def close(self) -> None:
        self.browser.close()
        self.engine.stop()


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


def values(page: Any, selector: str) -> dict[str, Any]:
    """`data-field` -> parsed `data-value` of the cells under `selector`."""
    cells = page.locator(f"{selector} [data-field][data-value]")
    return {
        cells.nth(i).get_attribute("data-field"): json.loads(cells.nth(i).get_attribute("data-value"))
        for i in range(cells.count())
    }


def usage_of(scenario: Scenario, conversation: str) -> dict[str, Any]:
    totals: dict[str, Any] = scenario.admin(f"usage?conversation={conversation}")["totals"]
    return totals


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


def last_call(scenario: Scenario, conversation: str, where: Any) -> dict[str, Any]:
    calls = scenario.admin(f"conversations/{conversation}/calls?limit=1000")["data"]
    return [c for c in calls if c["purpose"] == "main" and c["projection"] and where(c["projection"])][-1]


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
    assert f"event {seq}]" in sent and "[trimmed: tool result of bash" in sent, sent
    assert "[trimmed: tool result of bash" in row.locator("td").nth(3).locator("mark").inner_text(), (
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
    clean.shot(page, "tokens")
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

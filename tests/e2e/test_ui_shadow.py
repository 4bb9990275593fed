"""The inspector's shadow page (/ui/shadow) in headless chromium, over real shadow pairs: a rewrite
that trimmed away a fact the model needed (diverged) and one it did not need (equivalent), beside
an A/A pair. The page's numbers are the admin API's; the diverged pair links to the events the
rewrite cut and to the client's call; no request leaves the proxy, no script error, no CSP
violation.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.inspector import Browser, values
from tests.support.proxy_process import ProxyProcess
from tests.support.shadow import POLICY, agent_history, ask, ignores_the_fact, needs_the_fact, shadow_pairs
from tests.support.upstream_server import UpstreamServer

pytestmark = pytest.mark.browser


@pytest.fixture
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Browser]]:
    shots = Path(os.environ.get("CTXPROXY_UI_SCREENSHOTS") or tmp_path_factory.mktemp("ui-screenshots"))
    opened: list[Browser] = []

    def open_on(base: str) -> Browser:
        opened.append(Browser(base, shots))
        return opened[-1]

    yield open_on
    for b in opened:
        b.close()


def test_the_shadow_page_shows_divergence_beside_the_floor_and_the_diverged_pair(
    proxy: Callable[..., ProxyProcess],
    upstream: UpstreamServer,
    api_key: str,
    browser: Callable[[str], Browser],
) -> None:
    p = proxy(fresh=True, policies={"default": POLICY})
    upstream.responder = needs_the_fact
    _, diverging = ask(p, api_key, agent_history("ui-a"))
    [pair] = shadow_pairs(p, diverging)
    upstream.responder = ignores_the_fact
    _, equal = ask(p, api_key, agent_history("ui-b"))
    shadow_pairs(p, equal)
    upstream.responder = None
    plain = p.client(api_key).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "a plain question"}]
    )
    shadow_pairs(p, plain.headers["x-conversation-id"])
    api = p.admin_json("shadow")

    b = browser(p.url)
    context, page = b.login(viewport={"width": 1400, "height": 900})
    page.click("header nav >> text=Shadow")
    page.wait_for_url(f"{b.base}/ui/shadow")
    trimmed = next(g for g in api["report"]["groups"] if g["kind"] == "trimmed")
    shown = values(page, '#shadow-report tr[data-kind="trimmed"]')
    assert (
        (shown["pairs"], shown["diverged"], shown["rate"])
        == (2, 1, 0.5)
        == (
            trimmed["pairs"],
            trimmed["diverged"],
            trimmed["rate"],
        )
    )
    assert shown["interval"] == trimmed["interval"]
    assert (shown["floor_rate"], shown["floor_interval"]) == (0.0, [0.0, 0.0])
    row = page.locator(f'#diverged tr[data-call="{pair["id"]}"]')
    assert row.count() == 1 and page.locator("#diverged tbody tr").count() == 1
    assert '"deploy"' in row.locator("td.step.shadow").inner_text()
    assert '"read_config"' in row.locator("td.step.client").inner_text()
    b.shot(page, "shadow")
    cut = row.locator("ul.removed a").first
    low = pair["projection"]["shadow"]["removed"]["cut"][0][0]
    assert cut.inner_text().startswith(f"e{low}")
    cut.click()
    page.wait_for_url(f"{b.base}/ui/conversations/{diverging}/events**")
    assert page.locator(f"#e{low}").count() == 1
    page.go_back()
    row.locator("a", has_text="client's call").click()
    page.wait_for_url(f"{b.base}/ui/conversations/{diverging}/calls/{pair['projection']['shadow']['of']}")
    context.close()
    foreign = [url for url in b.requests if not url.startswith(b.base + "/")]
    assert b.requests and not foreign, foreign
    assert not b.errors, b.errors

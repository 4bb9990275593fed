"""The app's retention task: with tiny ages and a short interval, old call records and then
whole idle conversations disappear on their own."""

from __future__ import annotations

import pytest

from tests.support.e2e import user
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def test_retention_task_purges_calls_then_idle_conversations(proxy, upstream, api_key):
    # calls older than ~3 s, conversations idle for ~20 s; a pass every 0.3 s (ages long enough
    # that a loaded machine still sees the call record before its purge, and the conversation after).
    p = proxy(fresh=True, retention={"calls_days": 3 / 86400, "events_days": 20 / 86400, "interval_seconds": 0.3})
    upstream.push(Reply(content="hi"))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("retention")]})
    assert r.status_code == 200, r.text
    conv = r.headers["x-conversation-id"]
    p.wait_calls(conv, 1)

    wait_until(
        lambda: p.calls(conv) == [], timeout=60, interval=0.1, what="the retention task to purge the call records"
    )
    assert p.calls(conv) == []
    assert p.admin(f"conversations/{conv}").status_code == 200  # still within its idle age

    wait_until(
        lambda: p.admin(f"conversations/{conv}").status_code != 200,
        timeout=60,
        interval=0.1,
        what="the retention task to purge the idle conversation",
    )
    assert p.admin(f"conversations/{conv}").status_code == 404

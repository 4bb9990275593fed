"""The request log (proxy/request_log.py): one structured line per model call on the proxy's
stderr, key=value or JSON, with the start-up banner before them; secrets redacted."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from tests.support.e2e import user
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.upstream_server import Reply
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def lines_of(p: Any, mark: tuple[int, int], needle: str, n: int = 1) -> list[str]:
    def found() -> list[str] | None:
        lines = [line for line in p.stderr_since(mark).splitlines() if needle in line]
        return lines if len(lines) >= n else None

    return wait_until(found, timeout=10, what=f"{n} request log lines with {needle!r}")


def kv(line: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in shlex.split(line))


def test_a_kv_line_per_call_says_what_happened(proxy, upstream, api_key):
    p = proxy()
    mark = p.log_mark()
    upstream.push(Reply(content="hi", prompt_tokens=40, completion_tokens=5))
    raw = p.client(api_key).chat.completions.with_raw_response.create(model="gpt-4o", messages=[user("log me")])
    conversation = p.conversation(raw.headers["x-conversation-id"])["id"]
    [line] = lines_of(p, mark, f"conversation={conversation}")
    fields = kv(line)
    assert fields["wire"] == "openai_chat" and fields["route"] == "main" and fields["model"] == "gpt-4o"
    assert fields["status"] == "complete" and fields["upstream"] == "200" and fields["stream"] == "false"
    assert int(fields["client_tokens"]) > 0 and fields["sent_tokens"] == fields["client_tokens"]
    assert fields["rewritten"] == "as_sent" and fields["recall_rounds"] == "0"
    assert float(fields["latency_ms"]) > 0 and fields["call"].startswith("call_")
    assert "tenant" not in fields and "cost_usd" not in fields  # debug fields
    assert p.post_chat(api_key, {"model": "refused-model", "messages": [user("nowhere")]}).status_code == 502
    [line] = lines_of(p, mark, "model=refused-model")
    fields = kv(line)
    assert fields["status"] == "error" and "upstream" not in fields and fields["error"], line


def test_json_at_debug_with_secrets_redacted(proxy, upstream, api_key):
    p = proxy(request_log={"level": "debug", "format": "json"})
    banner = p.stderr()
    assert "listening on " + p.url in banner and "request log: debug, json" in banner
    assert f"inspector: {p.url}/ui/" in banner and "route main: model gpt-*" in banner
    assert "client keys: 0 configured (0 with limits); more are made with POST /admin/keys" in banner
    assert UPSTREAM_KEY not in banner
    mark = p.log_mark()
    upstream.push(Reply(status=502, error_body={"error": {"message": f"bad gateway, key {UPSTREAM_KEY}"}}))
    r = p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("echo the key")]})
    assert r.status_code == 502
    [line] = lines_of(p, mark, '"upstream":502')
    record = json.loads(line)
    assert record["status"] == "error" and record["wire"] == "openai_chat" and record["tenant"].startswith("t_")
    assert "bad gateway" in record["error"] and UPSTREAM_KEY not in line
    assert UPSTREAM_KEY not in p.stderr()


def test_off_writes_no_line(proxy, upstream, api_key):
    p = proxy(request_log={"level": "off"})
    mark = p.log_mark()
    p.client(api_key).chat.completions.create(model="gpt-4o", messages=[user("quiet")])
    p.post_chat(api_key, {"model": "gpt-4o", "messages": [user("quiet again")]})
    assert "call=" not in p.stderr_since(mark) and '"call":' not in p.stderr_since(mark)

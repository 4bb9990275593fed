"""A conversation moved from SQLite (and from Redis) to PostgreSQL goes on as the same conversation: real proxy
processes, the OpenAI SDK, the scripted upstream, a private PostgreSQL, and `ctxproxy
migrate-store` run as a command between them (verified, the URL's password never printed; a
rerun copies nothing; once the target has moved on, a rerun reports the difference)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cluster import answer_stored
from tests.support.postgres_server import PostgresServer
from tests.support.proxy_process import REPO, subprocess_env
from tests.support.redis_server import RedisServer

MODEL = "gpt-migrated"


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private redis-server for the Redis source (stopped and removed after)."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


def turn(p: Any, api_key: str, messages: list[dict[str, Any]]) -> tuple[str, str]:
    """One turn through the OpenAI SDK: (answer text, the conversation id the proxy reported)."""
    raw = p.client(api_key).chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    text = raw.parse().choices[0].message.content or ""
    return text, raw.headers["x-conversation-id"]


def migrate_command(source: str, target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "migrate-store", "--from", source, "--to", target],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_migrated_conversation_continues_on_postgres(
    kind: str,
    request: pytest.FixtureRequest,
    proxy: Any,
    upstream: Any,
    postgres_server: PostgresServer,
    api_key: str,
    tmp_path: Path,
) -> None:
    if kind == "sqlite":
        source = f"sqlite:///{tmp_path / 'before.db'}"
    else:
        source = request.getfixturevalue("own_redis").url + f"?prefix=moved{uuid.uuid4().hex[:8]}:"
    schema = f"moved_{uuid.uuid4().hex[:8]}"
    password = "pg-secret-" + uuid.uuid4().hex
    target = postgres_server.url(password=password) + f"?schema={schema}"
    try:
        on_sqlite = proxy(fresh=True, store=source)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "Migration test agent."}]
        conv = None
        for text in ("first question", "second question"):
            messages.append({"role": "user", "content": text})
            answer, conv = turn(on_sqlite, api_key, messages)
            answer_stored(on_sqlite, conv, answer)
            messages.append({"role": "assistant", "content": answer})
        assert conv is not None
        before = on_sqlite.events(conv)
        calls_before = on_sqlite.calls(conv)
        on_sqlite.stop()

        moved = migrate_command(source, target)
        assert moved.returncode == 0, moved.stderr
        assert "verified: 1 conversations match" in moved.stdout
        assert password not in moved.stdout + moved.stderr

        again = migrate_command(source, target)
        assert again.returncode == 0, again.stderr
        assert "copied: nothing" in again.stdout and "already in the target: 1 conversations" in again.stdout

        on_postgres = proxy(fresh=True, store=target)
        assert on_postgres.events(conv) == before and on_postgres.calls(conv) == calls_before
        messages.append({"role": "user", "content": "third question"})
        answer, same = turn(on_postgres, api_key, messages)
        assert same == conv, "the migrated conversation was not recognized"
        events = answer_stored(on_postgres, conv, answer)
        assert [(e["role"], e["message"]["content"]) for e in events] == [
            (m["role"], m["content"]) for m in [*messages[1:], {"role": "assistant", "content": answer}]
        ]
        assert len({e["branch_id"] for e in events}) == 1
        on_postgres.stop()

        # The target has moved on: a late rerun says so instead of passing it off as a copy.
        late = migrate_command(source, target)
        assert late.returncode == 1 and f"MISMATCH conversation {conv}: source 8 rows, target 11 rows" in late.stderr
    finally:
        postgres_server.drop_schemas(schema)

"""Fixtures for the store tests: a private redis-server for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisServer, set_session_server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    set_session_server(server)
    try:
        yield server
    finally:
        set_session_server(None)
        server.stop()

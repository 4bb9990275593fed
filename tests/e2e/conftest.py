"""Fixtures shared by the end-to-end tests: the raw-socket fault upstream (tests/support/fault_upstream.py),
scripted Anthropic upstreams (a fresh one per test, or one per module) and a scripted Responses
upstream of the default windows per module, cleared for each test (`rup`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.fault_upstream import FaultUpstream
from tests.support.proxy_process import UPSTREAM_KEY
from tests.support.responses_upstream import ResponsesServer


@pytest.fixture(scope="session")
def fault_server() -> Iterator[FaultUpstream]:
    server = FaultUpstream().start()
    yield server
    server.stop()


@pytest.fixture
def faults(fault_server: FaultUpstream) -> Iterator[FaultUpstream]:
    fault_server.clear()
    yield fault_server
    fault_server.clear()


@pytest.fixture
def anthropic_upstream() -> Iterator[AnthropicUpstream]:
    """A scripted Anthropic upstream of its own for one test (routes send it `UPSTREAM_KEY`)."""
    server = AnthropicUpstream(api_key=UPSTREAM_KEY)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def claude_server() -> Iterator[AnthropicUpstream]:
    """A scripted Anthropic upstream shared by one module's tests (routes send it `UPSTREAM_KEY`)."""
    server = AnthropicUpstream(api_key=UPSTREAM_KEY)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def responses_module_server() -> Iterator[ResponsesServer]:
    server = ResponsesServer().start()
    yield server
    server.stop()


@pytest.fixture
def rup(responses_module_server: ResponsesServer) -> Iterator[ResponsesServer]:
    """The module's scripted Responses upstream, cleared before and after the test."""
    responses_module_server.clear()
    yield responses_module_server
    responses_module_server.clear()


@pytest.fixture
def servers(
    upstream: Any, claude_server: AnthropicUpstream, responses_module_server: ResponsesServer
) -> Iterator[dict[str, Any]]:
    """The scripted upstream of each API by wire name, cleared around the test (a module that
    needs other servers defines its own `servers`)."""
    for server in (claude_server, responses_module_server):
        server.clear()
    yield {"openai_chat": upstream, "anthropic": claude_server, "openai_responses": responses_module_server}
    for server in (claude_server, responses_module_server):
        server.clear()

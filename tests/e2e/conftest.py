"""Fixtures of the end-to-end fault tests: the raw-socket fault upstream (tests/support/fault_upstream.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fault_upstream import FaultUpstream


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

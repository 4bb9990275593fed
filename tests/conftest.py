"""Shared fixtures: the scripted upstream and the real proxy as a subprocess.

- ``upstream_server`` (session): one :class:`UpstreamServer`; ``upstream`` (function) is the same
  server with its queue and request log cleared before and after each test.
- ``proxy`` (function): a factory ``proxy(**overrides) -> ProxyProcess``. The config is the default
  below deep-merged with ``overrides`` (dicts merge, everything else replaces). Instances are pooled
  per distinct config for the whole session, because each start costs seconds; ``fresh=True`` gives
  a private instance (own DB) that is stopped when the test ends -- use it for ``restart()``.
- ``api_key`` (function): a unique client key, so a test's tenant never sees another test's
  conversations even on a shared proxy.

Default routes (all share the one scripted upstream):
  ``gpt-*``     -> main: upstream key from $UPSTREAM_KEY, generous timeouts.
  ``slow-*``    -> slow: first_byte/idle 1 s (504 tests).
  ``refused-*`` -> refused: a port nothing listens on (502 tests).
  ``pass-*``    -> passthrough: no api_key_env, the client's Authorization is forwarded.

Environment for the subprocess: ``UPSTREAM_KEY``, ``CTXPROXY_ADMIN_TOKEN``,
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (no network in tests), ``TIKTOKEN_CACHE_DIR``.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import lanes
from tests.support.ports import free_port
from tests.support.postgres_server import postgres_server  # noqa: F401 -- the session's PostgreSQL, started on first use
from tests.support.proxy_process import ProxyProcess, deep_merge, default_config, subprocess_env
from tests.support.redis_server import redis_cluster  # noqa: F401 -- the session's Redis Cluster, started on first use
from tests.support.upstream_server import UpstreamServer


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane",
        choices=lanes.LANES,
        default="full",
        help="full: every test, properties at their own example counts; quick: no slow, agents, "
        "browser, cluster or soak tests, properties capped (tests/support/lanes.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in lanes.MARKS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    lanes.load(config.getoption("lane"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("lane") != "quick":
        return
    keep, long = [], []
    for item in items:
        (long if lanes.long_marks({m.name for m in item.iter_markers()}) else keep).append(item)
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = keep


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[UpstreamServer]:
    server = UpstreamServer(context_windows={"gpt-small": 300})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def upstream(upstream_server: UpstreamServer) -> Iterator[UpstreamServer]:
    upstream_server.clear()
    yield upstream_server
    upstream_server.clear()


@pytest.fixture(scope="session")
def closed_port() -> int:
    return free_port()  # nothing listens here (the probe socket is closed)


@pytest.fixture(scope="session")
def _proxy_pool(
    upstream_server: UpstreamServer, closed_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ProxyProcess]]:
    pool: dict[str, ProxyProcess] = {}
    yield pool
    for p in pool.values():
        p.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, attach what each proxy used by the test wrote to stderr meanwhile."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for p, mark in getattr(item, "_ctxproxy_used", []):
            text = p.stderr_since(mark)
            if text.strip():
                report.sections.append((f"proxy stderr {p.url}", text[-6000:]))


@pytest.fixture
def proxy(
    request: pytest.FixtureRequest,
    upstream_server: UpstreamServer,
    closed_port: int,
    _proxy_pool: dict[str, ProxyProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ProxyProcess]]:
    private: list[ProxyProcess] = []
    used: list[tuple[ProxyProcess, tuple[int, int]]] = []
    request.node._ctxproxy_used = used
    env = subprocess_env()

    def factory(fresh: bool = False, **overrides: Any) -> ProxyProcess:
        config = deep_merge(default_config(upstream_server.base_url, closed_port), overrides)
        key = json.dumps(config, sort_keys=True)
        if not fresh and key in _proxy_pool:
            p = _proxy_pool[key]
            if p.proc is None or p.proc.poll() is not None:
                raise RuntimeError(f"pooled proxy died; stderr:\n{p.stderr()[-6000:]}")
            used.append((p, p.log_mark()))
            return p
        workdir = Path(tempfile.mkdtemp(prefix="proxy-", dir=tmp_path_factory.getbasetemp()))
        p = ProxyProcess(config, workdir, env).start()
        used.append((p, (p.starts, 0)))
        if fresh:
            private.append(p)
        else:
            _proxy_pool[key] = p
        return p

    yield factory
    for p in private:
        p.stop()


@pytest.fixture
def api_key() -> str:
    return f"sk-test-{uuid.uuid4().hex}"

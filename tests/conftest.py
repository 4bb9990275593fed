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

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.support.upstream_server import UpstreamServer, _load_encoding

REPO = Path(__file__).resolve().parent.parent
UPSTREAM_KEY = "sk-upstream-secret-0123456789"
ADMIN_TOKEN = "admin-token-for-tests"
STARTUP_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def default_config(upstream_base_url: str, closed_port: int) -> dict[str, Any]:
    def route(name: str, model: str, base_url: str, key: bool = True, **timeouts: float) -> dict:
        t = {"connect": 5, "first_byte": 30, "idle": 30, "total": 120}
        t.update(timeouts)
        upstream: dict[str, Any] = {"base_url": base_url, "timeouts": t}
        if key:
            upstream["api_key_env"] = "UPSTREAM_KEY"
        return {"name": name, "match": {"model": model}, "upstream": upstream, "policy": "default"}

    return {
        "admin_token_env": "CTXPROXY_ADMIN_TOKEN",
        "limits": {"max_body_bytes": 33554432, "receive_timeout": 60},
        "routes": [
            route("main", "gpt-*", upstream_base_url),
            route("slow", "slow-*", upstream_base_url, first_byte=1, idle=1),
            route("refused", "refused-*", f"http://127.0.0.1:{closed_port}/v1", connect=2),
            route("passthrough", "pass-*", upstream_base_url, key=False),
        ],
        "policies": {"default": {"context_window": 128000, "max_output_tokens": 4096}},
    }


class ProxyProcess:
    """``python -m proxy.cli serve`` on a free port, with its own temp dir and SQLite file."""

    def __init__(self, config: dict[str, Any], workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.db_path = workdir / "ctxproxy.db"
        self.config = dict(config)
        self.config.setdefault("store", f"sqlite:///{self.db_path}")
        self.config_path = workdir / "ctxproxy.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.env = env
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def stderr_path(self) -> Path:
        return self.workdir / f"stderr.{self.starts}.log"

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_mark(self) -> tuple[int, int]:
        try:
            return self.starts, self.stderr_path.stat().st_size
        except OSError:
            return self.starts, 0

    def stderr_since(self, mark: tuple[int, int]) -> str:
        starts, offset = mark
        text = self.stderr()
        return text[offset:] if starts == self.starts else text

    def start(self) -> ProxyProcess:
        self.starts += 1
        cmd = [
            sys.executable,
            "-m",
            "proxy.cli",
            "serve",
            "--config",
            str(self.config_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        with open(self.workdir / f"stdout.{self.starts}.log", "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=out, stderr=err)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        last = "no attempt"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"proxy exited with {self.proc.returncode} during start-up\n"
                    f"cmd: {' '.join(cmd)}\nstderr:\n{self.stderr()[-6000:]}"
                )
            try:
                r = httpx.get(f"{self.url}/healthz", timeout=1)
                if r.status_code == 200 and r.json() == {"status": "ok"}:
                    return self
                last = f"{r.status_code} {r.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:
                last = repr(exc)
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"proxy not ready after {STARTUP_TIMEOUT}s (last /healthz: {last})\n"
            f"cmd: {' '.join(cmd)}\nstderr:\n{self.stderr()[-6000:]}"
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def restart(self) -> ProxyProcess:
        self.stop()
        return self.start()

    # ---- clients

    def client(self, api_key: str, **kw: Any) -> openai.OpenAI:
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 30)
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, **kw)

    def async_client(self, api_key: str, **kw: Any) -> openai.AsyncOpenAI:
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 30)
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=api_key, **kw)

    def post_chat(
        self, api_key: str | None, body: Any, headers: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        """Raw POST /v1/chat/completions; ``body`` may be a dict (JSON) or bytes/str (as is)."""
        h = {"Content-Type": "application/json"}
        if api_key is not None:
            h["Authorization"] = f"Bearer {api_key}"
        h.update(headers or {})
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        kw.setdefault("timeout", 30)
        return httpx.post(f"{self.base_url}/chat/completions", content=content, headers=h, **kw)

    # ---- admin API

    def admin(self, path: str, method: str = "GET", token: str | None = ADMIN_TOKEN, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        kw.setdefault("timeout", 10)
        return httpx.request(method, f"{self.url}/admin/{path.lstrip('/')}", headers=headers, **kw)

    def admin_json(self, path: str, **kw: Any) -> Any:
        r = self.admin(path, **kw)
        assert r.status_code == 200, f"admin {path}: {r.status_code} {r.text}"
        return r.json()

    def conversation(self, conv_id: str) -> dict[str, Any]:
        return self.admin_json(f"conversations/{conv_id}")

    def events(self, conv_id: str, **params: Any) -> list[dict[str, Any]]:
        """All events (follows ``next_after`` paging)."""
        out: list[dict[str, Any]] = []
        params = {k: v for k, v in params.items() if v is not None}
        for _ in range(1000):
            page = self.admin_json(f"conversations/{conv_id}/events", params=params)
            out.extend(page["data"])
            if page.get("next_after") is None or not page["data"]:
                return out
            params["after"] = page["next_after"]
        raise AssertionError("events paging did not end")

    def calls(self, conv_id: str) -> list[dict[str, Any]]:
        return self.admin_json(f"conversations/{conv_id}/calls")["data"]

    def wait_calls(
        self, conv_id: str, n: int, timeout: float = 10.0, until: Callable[[list[dict[str, Any]]], bool] | None = None
    ) -> list[dict]:
        """Call records are written when the exchange ends, possibly after the client has the
        response; poll until there are ``n`` of them (and ``until`` holds)."""
        deadline = time.monotonic() + timeout
        calls: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            r = self.admin(f"conversations/{conv_id}/calls")
            if r.status_code == 200:
                calls = r.json()["data"]
                if len(calls) >= n and (until is None or until(calls)):
                    return calls
            time.sleep(0.05)
        raise AssertionError(f"expected {n} call records for {conv_id}, have {calls!r}")


def _subprocess_env() -> dict[str, str]:
    _load_encoding()  # sets TIKTOKEN_CACHE_DIR in os.environ
    env = dict(os.environ)
    env.update(
        {
            "UPSTREAM_KEY": UPSTREAM_KEY,
            "CTXPROXY_ADMIN_TOKEN": ADMIN_TOKEN,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
        }
    )
    return env


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
    env = _subprocess_env()

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

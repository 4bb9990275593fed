"""The real proxy as a subprocess: ``python -m proxy.cli serve`` on a free port, with its own
work directory (config, SQLite file, stdout/stderr logs) that the caller owns -- the ``proxy``
fixture puts it under pytest's temp dir.

Also the default test config (see tests/conftest.py for the routes) and the subprocess
environment: ``UPSTREAM_KEY``, ``CTXPROXY_ADMIN_TOKEN``, ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (no
network in tests), ``TIKTOKEN_CACHE_DIR``.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from tests.support.ports import free_port
from tests.support.upstream_server import _load_encoding
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_KEY = "sk-upstream-secret-0123456789"
ADMIN_TOKEN = "admin-token-for-tests"
STARTUP_TIMEOUT = 20.0


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
        "open_access": True,  # any key is its own tenant; tests/e2e/test_auth.py configures clients
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

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        env: dict[str, str],
        args: Sequence[str] = (),
        module: str = "proxy.cli",
    ) -> None:
        self.workdir = workdir
        self.args = list(args)  # more `serve` options, e.g. --workers 2
        self.module = module  # what `python -m` runs with `serve ...` (tests.support.gc_probe wraps the proxy)
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

    def start(self, timeout: float | None = None) -> ProxyProcess:
        # Read at call time (not as the default's value), so a test can lengthen it.
        timeout = STARTUP_TIMEOUT if timeout is None else timeout
        self.starts += 1
        cmd = [
            sys.executable,
            "-m",
            self.module,
            "serve",
            "--config",
            str(self.config_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]
        with open(self.workdir / f"stdout.{self.starts}.log", "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=out, stderr=err)
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"proxy exited with {proc.returncode} during start-up\n"
                    f"cmd: {' '.join(cmd)}\nstderr:\n{self.stderr()[-6000:]}"
                )
            r = httpx.get(f"{self.url}/healthz", timeout=1)
            return r.status_code == 200 and r.json() == {"status": "ok"}

        try:
            wait_until(
                healthy,
                timeout=timeout,
                interval=0.1,
                what=f"{self.url}/healthz to answer ok",
                ignore=(httpx.HTTPError, ValueError),
            )
        except AssertionError as exc:
            self.stop()
            raise RuntimeError(
                f"proxy not ready: {exc}\ncmd: {' '.join(cmd)}\nstderr:\n{self.stderr()[-6000:]}"
            ) from None
        return self

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

        seen: list[dict[str, Any]] = []

        def enough() -> list[dict[str, Any]] | None:
            r = self.admin(f"conversations/{conv_id}/calls")
            if r.status_code == 200:
                seen[:] = r.json()["data"]
            return list(seen) if len(seen) >= n and (until is None or until(seen)) else None

        try:
            return wait_until(enough, timeout=timeout, what=f"{n} call records for {conv_id}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; have {seen!r}") from None


def subprocess_env() -> dict[str, str]:
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

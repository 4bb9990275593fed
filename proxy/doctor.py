"""`ctxproxy doctor`: a config checked against the live world, one line per check.

`check-config` says whether the file is right; `doctor` says whether what it names works now:
the store opens, answers and takes a write (a small fixed blob, read back); each route's upstream
answers a request that costs nothing (its model list, `Wire.probe`) and accepts the operator's key
when the route has one (a route forwarding each client's own key only has to answer); each
policy's summarizer is reachable with its key (a litellm provider without `base_url` is not
called: its key variable has to be set); and each policy's windows are known (configured or in
litellm's model map) or assumed (the default), which is worth a look. A line starts with `ok`,
`warn` or `FAIL`; the exit status is 1 when any check failed.

Example:
    ok   store: sqlite:///./ctxproxy.db opens, answers and takes a write
    FAIL route openai: https://api.openai.com/v1 rejects the key from $OPENAI_API_KEY (HTTP 401)
    warn window: policy 'default': gpt-9: window 128,000 (default), reply reserve ...
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .catalog import ModelCatalog
from .config import Config, Route, Upstream
from .credentials import Keys
from .describe import store_url, target
from .errors import ProxyError, StoreError
from .policy_settings import Summarizer as SummarizerSettings
from .projector import Projector
from .protocols import DEFAULT, wire_for_path
from .store import make_store, store_problem
from .upstream import RoutedUpstream

PROBE_DIGEST = "ctxproxy-doctor-probe"
PROBE_TIMEOUT = 15.0
"""Seconds a probe may take, whatever the route's own (long, generation-sized) timeouts."""


@dataclass(frozen=True)
class Check:
    verdict: Literal["ok", "warn", "FAIL"]
    what: str
    detail: str

    def line(self) -> str:
        return f"{self.verdict:<4} {self.what}: {self.detail}"


async def diagnose(config: Config, keys: Keys) -> list[Check]:
    """Every check of `config` (its keys resolved in `keys`), in order."""
    checks = [await store_check(config.store)]
    upstream = RoutedUpstream()
    await upstream.start()
    try:
        for route in config.routes:
            checks.append(await route_check(upstream, keys, route))
        for name, policy in config.policies.items():
            checks.append(await summarizer_check(upstream, keys, name, policy.summarizer))
    finally:
        await upstream.close()
    for line in Projector(ModelCatalog(), config.caches).windows.configure(config):
        checks.append(Check("warn" if "(default)" in line else "ok", "window", line))
    return checks


async def store_check(url: str) -> Check:
    shown = store_url(url)
    problem = store_problem(url)
    if problem is not None:
        return Check("FAIL", "store", f"{shown}: {problem}")
    store = make_store(url)
    try:
        await store.open()
        try:
            await store.ping()
            await store.put_blob(PROBE_DIGEST, "written by ctxproxy doctor")
            read = await store.get_blob(PROBE_DIGEST)
        finally:
            await store.close()
    except StoreError as exc:
        return Check("FAIL", "store", f"{shown}: {exc}")
    if read is None:
        return Check("FAIL", "store", f"{shown}: a write was not read back")
    return Check("ok", "store", f"{shown} opens, answers and takes a write")


async def route_check(upstream: RoutedUpstream, keys: Keys, route: Route) -> Check:
    what = f"route {route.name}"
    if route.upstream.model:
        return litellm_check(what, route.upstream, keys)
    wire = (wire_for_path(route.match.path) if route.match.path else None) or DEFAULT
    return await probe(upstream, what, route, wire.probe, keys.upstream_key(route), route.upstream.api_key_env)


async def summarizer_check(upstream: RoutedUpstream, keys: Keys, policy: str, settings: SummarizerSettings) -> Check:
    what = f"policy {policy!r} summarizer"
    if settings.model is None:
        return Check("ok", what, "the route's own upstream and model (checked with the route)")
    target_upstream = Upstream(model=settings.model, base_url=settings.base_url, api_key_env=settings.api_key_env)
    if settings.base_url is None:
        return litellm_check(what, target_upstream, keys)
    # an OpenAI-compatible server named by `base_url`: its model list, with the summarizer's key
    route = Route(name=f"summarizer-{policy}", upstream=Upstream(base_url=settings.base_url))
    key = keys.get(settings.api_key_env)
    return await probe(upstream, what, route, DEFAULT.probe, key, settings.api_key_env)


def litellm_check(what: str, upstream: Upstream, keys: Keys) -> Check:
    """A provider reached through litellm is not called (a call would be billed): its key must be there."""
    model = f"litellm {upstream.model}"
    if upstream.api_key_env:
        found = keys.get(upstream.api_key_env)
        if not found:
            return Check("FAIL", what, f"{model}: ${upstream.api_key_env} is not set")
        return Check("ok", what, f"{model} with the key from ${upstream.api_key_env} (not called)")
    if upstream.base_url is not None:
        return Check("ok", what, f"{model} at {upstream.base_url}, no key configured (not called)")
    from .upstream.litellm import missing_keys

    assert upstream.model is not None
    missing = missing_keys(upstream.model)
    if missing:
        return Check("FAIL", what, f"{model}: no key ({' or '.join(missing)} unset, no api_key_env)")
    return Check("ok", what, f"{model} with litellm's own key variable for it (not called)")


async def probe(
    upstream: RoutedUpstream,
    what: str,
    route: Route,
    request: Callable[[str | None], tuple[str, dict[str, str]]],
    key: str | None,
    variable: str | None,
) -> Check:
    """GET the route's probe (`request`: a wire's `probe`) and judge the answer."""
    path, headers = request(key)
    where = target(route)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            response = await upstream.send(route, "GET", path, None, headers)
            try:
                await response.read()
            finally:
                response.close()
    except TimeoutError:
        return Check("FAIL", what, f"{where} did not answer GET {path} within {PROBE_TIMEOUT:g} s")
    except ProxyError as exc:
        return Check("FAIL", what, f"{where} unreachable: {exc.message}")
    status = response.status
    if key is None:
        return Check(
            "ok",
            what,
            f"{where} answers (HTTP {status} to GET {path} without a key); each client's own key is forwarded",
        )
    if 200 <= status < 300:
        return Check("ok", what, f"{where} accepts the key from ${variable} (GET {path}: {status})")
    if status in (401, 403):
        return Check("FAIL", what, f"{where} rejects the key from ${variable} (HTTP {status} to GET {path})")
    return Check("warn", what, f"{where} answered HTTP {status} to GET {path}: the key from ${variable} is unconfirmed")

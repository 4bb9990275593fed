"""The operator's secrets, read once at start-up from the environment variables the config names.

Every `*_env` setting is resolved here and nowhere else: route upstream keys
(`routes[].upstream.api_key_env`) and summarizer keys (`policies.*.summarizer.api_key_env`) must be
set, or the proxy refuses to start with one line per missing variable, rather than failing with a
401 at the first request or the first compaction. The admin and metrics tokens are optional by
design: while a named variable is unset, its endpoints answer 404, as if they did not exist.
Client keys (`clients[].key_env`) must be set too; they are kept only as SHA-256 digests, like
the ones given as `key_sha256`. A route that spends the operator's key needs `clients:`, the
admin API (whose `POST /admin/keys` makes client keys) or an explicit `open_access: true`, or
the proxy refuses to start: an unauthenticated proxy in front
of the operator's key lets anyone who reaches it spend that key.
Values are never logged or stored; only the names appear in messages.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import parse_qsl, urlencode

from .config import Client, Config, Route
from .errors import ConfigError
from .protocols import CREDENTIAL_QUERY

REDACTED = b"[redacted]"


@dataclass(frozen=True)
class Keys:
    values: Mapping[str, str] = field(default_factory=dict)
    """Resolved secrets by environment variable name."""
    routes: Mapping[str, str] = field(default_factory=dict)
    """Upstream keys by route name."""
    admin_token: str | None = None
    metrics_token: str | None = None
    clients: tuple[tuple[bytes, Client], ...] = ()
    """The configured clients with the SHA-256 digest of their key."""

    def upstream_key(self, route: Route) -> str | None:
        return self.routes.get(route.name)

    def client_for(self, presented: str | None) -> Client | None:
        """The configured client whose key was presented, compared in constant time: every
        digest is compared, whichever matches."""
        if not presented or not self.clients:
            return None
        digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
        found = None
        for expected, client in self.clients:
            if hmac.compare_digest(digest, expected):
                found = client
        return found

    def get(self, env_name: str | None) -> str | None:
        return self.values.get(env_name) if env_name else None

    def redact(self, data: bytes, caller_key: str | None = None) -> bytes:
        """`data` with every operator secret (and `caller_key`, the request's own key) replaced: an
        upstream that echoes the key it was sent in an error body or header must not hand it to
        the client, the records or the logs."""
        secrets = self._secrets
        if caller_key and len(caller_key) >= 8:
            secrets = sorted({*secrets, caller_key.encode("utf-8", "surrogatepass")}, key=len, reverse=True)
        for secret in secrets:
            if secret in data:
                data = data.replace(secret, REDACTED)
        return data

    def redact_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(name, self.redact(value.encode("latin-1")).decode("latin-1")) for name, value in headers]

    @cached_property
    def _secrets(self) -> list[bytes]:
        found = {*self.values.values(), *self.routes.values(), self.admin_token, self.metrics_token}
        return sorted((s.encode() for s in found if s and len(s) >= 8), key=len, reverse=True)


def redact_query(target: str, names: frozenset[str] = CREDENTIAL_QUERY) -> str:
    """A request target (`path?query`) with the values of the query parameters that carry a
    caller's key (`names`: every wire's `credential_query`) replaced."""
    path, mark, query = target.partition("?")
    if not mark or not names:
        return target
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(name in names for name, _ in pairs):
        return target
    return path + "?" + urlencode([(name, REDACTED.decode() if name in names else value) for name, value in pairs])


class QueryRedaction(logging.Filter):
    """uvicorn's access log line (`--access-log`) without a key given in the query string."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > 2 and isinstance(args[2], str):
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True


def redact_access_log() -> None:
    """Install `QueryRedaction` on uvicorn's access logger (once)."""
    access = logging.getLogger("uvicorn.access")
    if CREDENTIAL_QUERY and not any(isinstance(f, QueryRedaction) for f in access.filters):
        access.addFilter(QueryRedaction())


def _summarizer_key(policy: str, model: str) -> list[str]:
    """A litellm summarizer without `api_key_env` calls its provider with litellm's own default
    key variable: it must be set, or every compaction fails at its first summary."""
    from .upstream.litellm import missing_keys  # litellm is imported only for such a summarizer

    missing = missing_keys(model)
    if not missing:
        return []
    return [
        f"policies.{policy}.summarizer.api_key_env: summarizer model {model!r} needs a key: name the variable "
        f"holding it in api_key_env, or set {' or '.join(missing)} (litellm's default for it)"
    ]


def resolve_keys(config: Config, env: Mapping[str, str] | None = None) -> Keys:
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    routes: dict[str, str] = {}
    problems: list[str] = []

    def need(name: str, where: str) -> str | None:
        value = env.get(name)
        if not value:
            problems.append(f"{where}: environment variable {name} is not set")
            return None
        values[name] = value
        return value

    for index, route in enumerate(config.routes):
        if route.upstream.api_key_env:
            key = need(route.upstream.api_key_env, f"routes.{index}.upstream.api_key_env")
            if key is not None:
                routes[route.name] = key
    for name, policy in config.policies.items():
        summarizer = policy.summarizer
        if summarizer.api_key_env:
            need(summarizer.api_key_env, f"policies.{name}.summarizer.api_key_env")
        elif summarizer.model and summarizer.base_url is None:
            problems.extend(_summarizer_key(name, summarizer.model))
    clients: list[tuple[bytes, Client]] = []
    for index, client in enumerate(config.clients):
        if client.key_sha256 is not None:
            clients.append((bytes.fromhex(client.key_sha256), client))
        elif client.key_env and (value := env.get(client.key_env)):
            clients.append((hashlib.sha256(value.encode()).digest(), client))  # only the digest is kept
        else:
            problems.append(f"clients.{index}.key_env: environment variable {client.key_env} is not set")
    admin = env.get(config.admin_token_env) if config.admin_token_env else None
    if not config.clients and not config.open_access and not admin:
        problems.extend(
            f"routes.{index}.upstream.api_key_env: route {route.name!r} spends the operator's key, and no "
            "clients are configured to authenticate its callers: add clients: (see config.example.yaml), "
            "make client keys through the admin API (POST /admin/keys; set admin_token_env and its variable), "
            "or set open_access: true to serve anyone who can reach the proxy"
            for index, route in enumerate(config.routes)
            if route.upstream.api_key_env
        )
    if problems:
        raise ConfigError(problems)
    metrics = env.get(config.metrics_token_env) if config.metrics_token_env else None
    return Keys(values, routes, admin or None, metrics or None, tuple(clients))

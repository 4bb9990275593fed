"""Configuration: the frozen models one YAML file is validated into once, at start-up.

`Config` is the whole file: the store, the clients and tenants, the server's limits and caches,
the routes (`Route`: which requests, which `Upstream`, which policy) and the policies, whose
settings are in `proxy/policy_settings.py`. Reading the file, putting the environment into it
and reporting its problems is `proxy/config_file.py` (`load_config`, `parse_config`).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from . import renderings
from .policy_settings import Policy
from .quota import Quota
from .store.urls import FORMS, scheme_of
from .tool_settings import Frozen as _Frozen


class Timeouts(_Frozen):
    """Upstream deadlines in seconds. `first_byte` bounds the wait for response headers,
    `idle` the gap between two streamed chunks, `total` the whole exchange."""

    connect: float = Field(10.0, gt=0)
    first_byte: float = Field(300.0, gt=0)
    idle: float = Field(300.0, gt=0)
    total: float = Field(900.0, gt=0)


class Upstream(_Frozen):
    """An OpenAI-compatible server (`base_url`, raw HTTP), or with `model` any provider through
    litellm (`anthropic/claude-haiku-4-5`; `base_url` is then litellm's optional `api_base`)."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeouts: Timeouts = Timeouts()

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"must be an http(s) URL such as https://api.openai.com/v1, got {value!r}")
        return value.rstrip("/")

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must be a litellm model string such as anthropic/claude-haiku-4-5")
        return value

    @model_validator(mode="after")
    def _has_target(self) -> Upstream:
        if self.base_url is None and self.model is None:
            raise ValueError(
                "needs base_url (an OpenAI-compatible server) or model (a litellm model string such as "
                "anthropic/claude-haiku-4-5)"
            )
        return self


class Match(_Frozen):
    model: str = "*"
    path: str | None = None

    def matches(self, path: str, model: str) -> bool:
        if self.path is not None and self.path != path:
            return False
        return fnmatch.fnmatchcase(model, self.model)


class Route(_Frozen):
    name: str
    match: Match = Match()
    upstream: Upstream
    policy: str = "default"


_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class Client(_Frozen):
    """A client allowed to spend the operator's upstream keys (LiteLLM's "virtual keys"). Its key
    comes from an environment variable (`key_env`) or is given as the hex SHA-256 digest of the
    key (`key_sha256`), so the config file never holds it. Its requests belong to `tenant`
    (default: the client's name): clients given the same tenant share conversations on purpose.
    `routes` limits the route names it may use (default: every route)."""

    name: str = Field(pattern=_NAME)
    key_env: str | None = None
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    tenant: str | None = Field(None, pattern=_NAME)
    routes: tuple[str, ...] | None = None
    quota: Quota | None = None
    """its budgets and rate limits (`proxy/quota.py`)"""

    @model_validator(mode="after")
    def _one_key(self) -> Client:
        if re.fullmatch(r"key_[0-9a-f]{12}", self.name):
            raise ValueError("name must not look like an API key's id (key_ and 12 hex digits)")
        if (self.key_env is None) == (self.key_sha256 is None):
            raise ValueError("needs exactly one of key_env (an environment variable) or key_sha256 (a hex digest)")
        if self.tenant_name == "anonymous" or self.tenant_name.startswith("t_"):
            raise ValueError("tenant must not be 'anonymous' or start with 't_' (the names of key fingerprints)")
        return self

    @property
    def tenant_name(self) -> str:
        return self.tenant or self.name


class Limits(_Frozen):
    """What a client may send (proxy/serving/request_head.py enforces the head, proxy/asgi.py the body)."""

    max_body_bytes: int = Field(32 * 1024 * 1024, gt=0)
    receive_timeout: float = Field(60.0, gt=0)
    header_timeout: float = Field(10.0, gt=0)
    """Seconds from a connection's first byte (or its opening) to the end of the request head."""
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    """Request line plus all header lines."""
    max_headers: int = Field(100, ge=8)


class Retention(_Frozen):
    """How long records are kept, in days (null: forever). `events_days` deletes whole
    conversations whose last activity is older; `checkpoints_days` superseded and failed
    checkpoints; `calls_days` call records. Checked every `interval_seconds`."""

    events_days: float | None = Field(None, gt=0)
    checkpoints_days: float | None = Field(None, gt=0)
    calls_days: float | None = Field(None, gt=0)
    interval_seconds: float = Field(3600.0, gt=0)


class Caches(_Frozen):
    """Per-process memory that spares recomputation, each bounded (proxy/services.py builds them).
    All of it is derived state: a smaller cache costs CPU on misses, never correctness."""

    history_mb: float = Field(160.0, gt=0)
    """Remembered request histories and bodies (proxy/history_cache.py), by the approximate bytes
    they hold (a history 5x its body's bytes: `HISTORY_PER_BODY_BYTE`): 160 MB holds about 400
    histories of 80 kB bodies (the bodies go first when it is full)."""
    histories_per_first_message: int = Field(
        64, gt=0, validation_alias=AliasChoices("histories_per_first_message", "history_per_conversation")
    )
    """Histories remembered per first message of a tenant: the branches of one conversation, and
    the conversations that open alike (agents in one repository, one harness). Read also under
    its old name, `history_per_conversation`."""
    bodies_per_credential: int = Field(64, gt=0)
    """Request bodies remembered per caller API key (proxy/tail_parse.py): one per conversation in use."""
    token_counts: int = Field(100_000, gt=0)
    """Token counts per tokenizer encoding, by event hash (proxy/token_counter.py)."""
    projection_branches: int = Field(256, gt=0)
    """Branches whose projection memo is kept (proxy/projector.py): the most recently used."""
    projection_memo_entries: int = Field(4096, gt=0)
    """Derived renderings memoized per branch (cleared when full)."""
    calibrations: int = Field(256, gt=0)
    """Branches whose last billed call is remembered (the part of the next request the upstream
    has already counted: `proxy.estimate`). Each holds that call's messages, a whole history of
    its own once the history cache dropped the branch's: 10,000 held 130 MB with 1,024
    conversations of 500 messages in use (`python -m bench --only active`)."""
    shared_prompts_mb: float = Field(64.0, ge=0)
    """The last answered requests kept for a shared summary (`proxy/last_sent.py`; `summarizer.mode`
    `auto` or `shared`), of the branches near a compaction only, by the approximate memory they
    hold (3x their bytes as sent: `PER_BYTE`), the least recently answered dropped first: 64 MB
    holds about 300 requests of 80 kB. A compaction of a branch not kept asks ctxproxy's own
    summarizer instead (a `shared_fallback`). 0: none kept."""


class Server(_Frozen):
    """How `ctxproxy serve` listens, caps and drains (proxy/serving/server.py, proxy/serving/gate.py)."""

    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)
    http: Literal["auto", "h11", "httptools"] = "auto"
    """uvicorn's HTTP/1.1 implementation; `auto` is httptools when it is installed."""
    max_concurrent_requests: int | None = Field(256, ge=1)
    """Model calls served at once (streams count until they end); more get 503 + Retry-After."""
    retry_after: int = Field(1, ge=0)
    shutdown_grace: float = Field(30.0, ge=0)
    """On SIGTERM: how long in-flight model calls may run on after readiness failed."""


class RequestLog(_Frozen):
    """The request log (proxy/request_log.py): a line per model call on stderr. `level`: `off`,
    `info` (conversation, wire, model, status, tokens, rewrites, recall rounds, latency) or
    `debug` (plus tenant, branch, billed usage, cost, time to first byte, request id); `format`:
    `kv` (key=value) or `json`."""

    level: Literal["off", "info", "debug"] = "info"
    format: Literal["kv", "json"] = "kv"


class Config(_Frozen):
    store: str = "sqlite:///./ctxproxy.db"
    admin_token_env: str | None = None
    metrics_token_env: str | None = None
    conversation_header: str = "X-Conversation-Id"
    session_headers: tuple[str, ...] = ("x-claude-code-session-id", "session-id")
    """Request headers naming an agent session (first present wins): a request whose history
    matches nothing continues its session's conversation as a new branch (see proxy/ingest.py)."""
    transient_parts: tuple[str, ...] = renderings.DEFAULT_TRANSIENT_PARTS
    """Text parts of a user message that identity ignores when the message has other parts:
    regular expressions matched against a whole stripped part (case-insensitive, `.` matching
    newlines); the default is a short `<system-reminder>` block that states the date (Claude
    Code's and Qwen Code's). Matching only: what is stored and sent is the request as it came.
    `[]` turns the rule off; see proxy/renderings.py and docs/identity.md."""
    transient_max_chars: int = Field(renderings.DEFAULT_TRANSIENT_MAX_CHARS, ge=0)
    """A longer part is content, whatever it matches (long reminders carry real context)."""
    compaction_lease_seconds: float = Field(30.0, ge=1)
    """How long a replica's compaction lease lives without renewal: a replica that dies
    mid-compaction blocks the branch's compaction this long at most."""
    clients: tuple[Client, ...] = ()
    """The client keys that may spend the operator's keys (see `Client` and proxy/auth.py)."""
    open_access: bool = False
    """Serve routes that use the operator's key (`api_key_env`) to callers without a client key,
    as before `clients:` existed: anyone who can reach the proxy spends the key. Without it and
    without clients, the proxy refuses to start when a route has `api_key_env`."""
    tenants: dict[str, Quota] = Field(default_factory=dict)
    """Budgets and rate limits per tenant name (`proxy/quota.py`), over every key of the tenant."""
    clock_offset_seconds: float = Field(0.0, ge=0)
    """Added to the clock that budgets, rate limits and key expiry read: 86400 puts the proxy in
    tomorrow's budget period. For drills and tests; 0 in production."""
    server: Server = Server()
    limits: Limits = Limits()
    retention: Retention = Retention()
    caches: Caches = Caches()
    request_log: RequestLog = RequestLog()
    routes: list[Route] = Field(min_length=1)
    policies: dict[str, Policy] = Field(default_factory=lambda: {"default": Policy()})

    @field_validator("transient_parts")
    @classmethod
    def _patterns_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{pattern!r} is not a regular expression: {e}") from None
        return value

    @field_validator("store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        if scheme_of(value) is None:
            raise ValueError(f"must be {FORMS}")
        return value

    @model_validator(mode="after")
    def _routes_resolve(self) -> Config:
        names: set[str] = set()
        for index, route in enumerate(self.routes):
            if route.name in names:
                raise ValueError(f"routes.{index}.name: duplicate route name {route.name!r}")
            names.add(route.name)
            if route.policy not in self.policies:
                known = ", ".join(sorted(self.policies)) or "none"
                raise ValueError(f"routes.{index}.policy: unknown policy {route.policy!r} (defined: {known})")
        clients: set[str] = set()
        for index, client in enumerate(self.clients):
            if client.name in clients:
                raise ValueError(f"clients.{index}.name: duplicate client name {client.name!r}")
            clients.add(client.name)
            unknown = sorted(set(client.routes or ()) - names)
            if unknown:
                raise ValueError(f"clients.{index}.routes: unknown route(s) {', '.join(unknown)}")
        return self

    def route_for(self, path: str, model: str) -> Route | None:
        for route in self.routes:
            if route.match.matches(path, model):
                return route
        return None

    def policy_for(self, route: Route) -> Policy:
        return self.policies[route.policy]

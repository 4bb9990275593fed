"""What a config resolves to, in lines a person reads: `ctxproxy check-config`'s answer, and the
banner `ctxproxy serve` logs once it listens (the address, the store, the routes, whether the
admin API and the inspector are on and how to reach them, the request log).

Secrets never appear: keys are named by their variables, a store URL's password is masked.
"""

from __future__ import annotations

import re

from .config import Client, Config, Route

_PASSWORD = re.compile(r"(://[^:/@]*):[^@/]*@")


def store_url(url: str) -> str:
    """`url` with its password masked (`redis://:***@host:6379/0`)."""
    return _PASSWORD.sub(r"\1:***@", url)


def target(route: Route) -> str:
    upstream = route.upstream
    if upstream.model:
        return f"litellm {upstream.model}" + (f" at {upstream.base_url}" if upstream.base_url else "")
    return str(upstream.base_url)


def _client(client: Client) -> str:
    key = f"key from ${client.key_env}" if client.key_env else "key by SHA-256 digest"
    routes = f"; routes {', '.join(client.routes)}" if client.routes is not None else ""
    return f"{client.name} (tenant {client.tenant_name}; {key}{routes})"


def route_line(config: Config, route: Route) -> str:
    match = f"model {route.match.model}" + (f", path {route.match.path}" if route.match.path else "")
    key = f"key from ${route.upstream.api_key_env}" if route.upstream.api_key_env else "client's own key"
    policy = config.policies[route.policy]
    window = policy.context_window or "model default"
    return (
        f"route {route.name}: {match} -> {target(route)} ({key}); policy {route.policy} "
        f"(window {window}, trigger {policy.trigger:g}, keep_recent_tokens {policy.keep_recent_tokens})"
    )


def describe(config: Config) -> list[str]:
    """`check-config`'s lines: the store, the admin API, clients, access, each route."""
    admin = f"on when ${config.admin_token_env} is set" if config.admin_token_env else "off"
    lines = [f"store: {store_url(config.store)}", f"admin API: {admin}"]
    if config.clients:
        lines.append("clients: " + ", ".join(_client(c) for c in config.clients))
    if config.open_access:
        lines.append("open access: callers without a client key may use routes with the operator's key")
    lines.extend(route_line(config, route) for route in config.routes)
    return lines


def banner(config: Config, url: str, admin_on: bool, version: str) -> list[str]:
    """The lines `serve` logs once it listens on `url` (`admin_on`: the admin token is set)."""
    lines = [f"ctxproxy {version} listening on {url}", f"store: {store_url(config.store)}"]
    lines.extend(route_line(config, route) for route in config.routes)
    variable = config.admin_token_env
    if admin_on:
        lines.append(f"admin API: {url}/admin/ (Authorization: Bearer ${variable})")
        lines.append(f"inspector: {url}/ui/ (log in with the value of ${variable})")
    elif variable:
        lines.append(f"admin API and inspector: off, ${variable} is not set (export it to turn them on)")
    else:
        lines.append("admin API and inspector: off (set admin_token_env in the config, and export that variable)")
    log = config.request_log
    lines.append("request log: off" if log.level == "off" else f"request log: {log.level}, {log.format}, on stderr")
    lines.append(
        f"clients: OpenAI SDKs base_url {url}/v1; Anthropic SDK and Claude Code base URL {url}; "
        f"Google GenAI SDKs and Gemini CLI (GOOGLE_GEMINI_BASE_URL) {url}"
    )
    return lines

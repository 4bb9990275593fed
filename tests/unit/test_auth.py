"""`clients:` in the config, their keys at start-up, and who a request is (proxy/auth.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from proxy.auth import authenticate
from proxy.config_file import parse_config
from proxy.credentials import resolve_keys
from proxy.errors import ConfigError, Forbidden, Unauthorized
from proxy.protocols import DEFAULT

SALT = b"s" * 32
OPERATOR = "sk-operator-key-123456"


def config(**extra: Any) -> Any:
    routes = [
        {"name": "paid", "match": {"model": "gpt-*"}, "upstream": {"base_url": "http://up/v1", "api_key_env": "K"}},
        {"name": "own", "match": {"model": "*"}, "upstream": {"base_url": "http://up/v1"}},
    ]
    return parse_config({"routes": routes, **extra}, env={})


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


CLIENTS = [
    {"name": "alice", "key_env": "ALICE", "tenant": "team-a"},
    {"name": "bot", "key_sha256": digest("bot-key-1"), "tenant": "team-a", "routes": ["paid"]},
    {"name": "carol", "key_sha256": digest("carol-key").upper()},
]


@pytest.mark.parametrize(
    ("client", "problem"),
    [
        ({"name": "x"}, "exactly one of key_env"),
        ({"name": "x", "key_env": "A", "key_sha256": digest("a")}, "exactly one of key_env"),
        ({"name": "x", "key_sha256": "abc"}, "key_sha256"),
        ({"name": "x", "key_env": "A", "tenant": "anonymous"}, "must not be 'anonymous'"),
        ({"name": "t_x", "key_env": "A"}, "start with 't_'"),
        ({"name": "x y", "key_env": "A"}, "name"),
        ({"name": "x", "key_env": "A", "routes": ["nope"]}, "unknown route(s) nope"),
    ],
)
def test_client_entries_are_validated(client: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(clients=[client])
    assert problem in str(info.value)


def test_duplicate_client_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="duplicate client name 'a'"):
        config(clients=[{"name": "a", "key_env": "A"}, {"name": "a", "key_env": "B"}])


def test_the_operator_key_without_clients_refuses_to_start_unless_open() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_keys(config(), {"K": OPERATOR})
    assert info.value.problems == [
        "routes.0.upstream.api_key_env: route 'paid' spends the operator's key, and no clients are configured "
        "to authenticate its callers: add clients: (see config.example.yaml), make client keys through the admin "
        "API (POST /admin/keys; set admin_token_env and its variable), or set open_access: true to serve anyone "
        "who can reach the proxy"
    ]
    assert resolve_keys(config(open_access=True), {"K": OPERATOR}).clients == ()
    # client keys made through the admin API authenticate the callers
    assert resolve_keys(config(admin_token_env="ADMIN"), {"K": OPERATOR, "ADMIN": "admin-token-1"}).clients == ()
    with pytest.raises(ConfigError):  # named, but not set: no key can be made
        resolve_keys(config(admin_token_env="ADMIN"), {"K": OPERATOR})


def test_client_keys_from_env_must_be_set_and_are_kept_as_digests() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_keys(config(clients=CLIENTS), {"K": OPERATOR})
    assert info.value.problems == ["clients.0.key_env: environment variable ALICE is not set"]
    keys = resolve_keys(config(clients=CLIENTS), {"K": OPERATOR, "ALICE": "alice-key"})
    assert "alice-key" not in repr(keys)
    assert keys.client_for("alice-key").name == "alice"  # type: ignore[union-attr]
    assert keys.client_for("bot-key-1").name == "bot"  # type: ignore[union-attr]
    assert keys.client_for("carol-key").name == "carol"  # type: ignore[union-attr]
    for wrong in ("alice-ke", "alice-key ", "", None, digest("alice-key"), OPERATOR):
        assert keys.client_for(wrong) is None


def test_who_a_request_is() -> None:
    cfg = config(clients=CLIENTS)
    keys = resolve_keys(cfg, {"K": OPERATOR, "ALICE": "alice-key"})
    paid, own = cfg.routes

    def who(route: Any, **headers: str) -> Any:
        return authenticate(keys, cfg, route, DEFAULT.client_key(headers), SALT)

    alice = who(paid, authorization="Bearer alice-key")
    assert (alice.tenant, alice.client, alice.forwards_key) == ("team-a", "alice", False)
    assert who(paid, **{"x-api-key": "bot-key-1"}).tenant == "team-a"
    assert who(own, **{"api-key": "carol-key"}).tenant == "carol"
    with pytest.raises(Forbidden, match="'bot' may not use route 'own'"):
        who(own, authorization="Bearer bot-key-1")
    for headers in ({}, {"authorization": "Bearer sk-random"}, {"x-api-key": OPERATOR}):
        with pytest.raises(Unauthorized) as info:
            who(paid, **headers)
        assert OPERATOR not in info.value.message and "sk-random" not in info.value.message
    with pytest.raises(Unauthorized):
        who(own)  # authentication is on: no anonymous tenant
    stranger = who(own, authorization="Bearer sk-own-provider-key")
    assert stranger.client is None and stranger.forwards_key and stranger.tenant.startswith("t_")


def test_open_access_keeps_fingerprint_tenants() -> None:
    cfg = config(open_access=True)
    keys = resolve_keys(cfg, {"K": OPERATOR})
    caller = authenticate(keys, cfg, cfg.routes[0], "sk-a", SALT)
    assert caller.tenant.startswith("t_") and caller.forwards_key
    assert authenticate(keys, cfg, cfg.routes[0], None, SALT).tenant == "anonymous"


def test_operator_secrets_are_redacted_from_echoes() -> None:
    cfg = config(open_access=True, admin_token_env="ADMIN")
    keys = resolve_keys(cfg, {"K": OPERATOR, "ADMIN": "admin-token-xyz"})
    body = f'{{"error": "bad key {OPERATOR}", "token": "admin-token-xyz"}}'.encode()
    assert keys.redact(body) == b'{"error": "bad key [redacted]", "token": "[redacted]"}'
    assert keys.redact_headers([("x-echo", f"Bearer {OPERATOR}")]) == [("x-echo", "Bearer [redacted]")]
    assert keys.redact(b"nothing secret") == b"nothing secret"

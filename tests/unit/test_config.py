"""Config: validated once into frozen models; every problem is one line naming file and field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest

from proxy.config import Config
from proxy.config_file import parse_config
from proxy.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def route(name: str, model: str = "*", path: str | None = None, **upstream: Any) -> dict[str, Any]:
    match: dict[str, Any] = {"model": model}
    if path is not None:
        match["path"] = path
    return {"name": name, "match": match, "upstream": {"base_url": "https://api.example.test/v1", **upstream}}


def problems(data: Any, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "cfg.yaml", env or {})
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def test_happy_path() -> None:
    config = parse_config(
        {
            "store": "sqlite:///tmp/x.db",
            "conversation_header": "X-Session",
            "routes": [
                {
                    "name": "main",
                    "match": {"model": "gpt-*"},
                    "policy": "tight",
                    "upstream": {
                        "base_url": "https://api.openai.com/v1/",
                        "api_key_env": "OPENAI_KEY",
                        "timeouts": {"connect": 2, "idle": 30},
                    },
                },
            ],
            "policies": {
                "tight": {
                    "context_window": 32000,
                    "trigger": 0.7,
                    "target": 0.4,
                    "tool_results": {"exclude_tools": ["read_file"]},
                }
            },
            "limits": {"max_body_bytes": 1000},
        },
        "cfg.yaml",
        {},
    )
    assert isinstance(config, Config)
    assert config.store == "sqlite:///tmp/x.db"
    assert config.conversation_header == "X-Session"
    (main,) = config.routes
    assert main.upstream.base_url == "https://api.openai.com/v1"  # trailing slash removed
    assert main.upstream.api_key_env == "OPENAI_KEY"
    assert (main.upstream.timeouts.connect, main.upstream.timeouts.idle, main.upstream.timeouts.total) == (2, 30, 900)
    policy = config.policy_for(main)
    assert (policy.context_window, policy.trigger, policy.target) == (32000, 0.7, 0.4)
    assert policy.tool_results.exclude_tools == ("read_file",)
    assert policy.tool_results.keep_recent_groups == 4
    assert config.limits.max_body_bytes == 1000
    assert config.server.port == 8787


def test_defaults() -> None:
    config = parse_config({"routes": [route("r")]}, "cfg.yaml", {})
    assert config.store == "sqlite:///./ctxproxy.db"
    assert config.conversation_header == "X-Conversation-Id"
    assert list(config.policies) == ["default"]
    policy = config.policy_for(config.routes[0])
    assert (policy.trigger, policy.target, policy.keep_recent_tokens) == (0.8, 0.5, 20000)
    assert config.routes[0].policy == "default"


def test_prompt_cache_key_setting() -> None:
    """On by default, off per policy, and only a boolean: 'no' or 'sometimes' is a problem line."""
    config = parse_config(
        {"routes": [route("r")], "policies": {"default": {"prompt_cache_key": False}}}, "cfg.yaml", {}
    )
    assert config.policy_for(config.routes[0]).prompt_cache_key is False
    config = parse_config({"routes": [route("r")]}, "cfg.yaml", {})
    assert config.policy_for(config.routes[0]).prompt_cache_key is True
    for value in ("no", "sometimes", 1):
        found = problems({"routes": [route("r")], "policies": {"default": {"prompt_cache_key": value}}})
        assert len(found) == 1 and "prompt_cache_key" in found[0] and "boolean" in found[0], found


def test_summarizer_mode() -> None:
    """`auto` by default; `native` asks the route's own provider, so it takes no summarizer model."""
    config = parse_config({"routes": [route("r")]}, "cfg.yaml", {})
    assert config.policy_for(config.routes[0]).summarizer.mode == "auto"
    native = {"summarizer": {"mode": "native"}}
    config = parse_config({"routes": [route("r")], "policies": {"default": native}}, "cfg.yaml", {})
    assert config.policy_for(config.routes[0]).summarizer.mode == "native"
    both = {"summarizer": {"mode": "native", "model": "openai/gpt-4o-mini"}}
    found = problems({"routes": [route("r")], "policies": {"default": both}})
    assert len(found) == 1 and "takes no summarizer model" in found[0], found
    found = problems({"routes": [route("r")], "policies": {"default": {"summarizer": {"mode": "provider"}}}})
    assert len(found) == 1 and "mode" in found[0], found
    # `shared` reads the conversation's own cache: the route's own model, never another
    shared = {"summarizer": {"mode": "shared"}}
    config = parse_config({"routes": [route("r")], "policies": {"default": shared}}, "cfg.yaml", {})
    assert config.policy_for(config.routes[0]).summarizer.mode == "shared"
    found = problems(
        {"routes": [route("r")], "policies": {"default": {"summarizer": {"mode": "shared", "model": "x/y"}}}}
    )
    assert len(found) == 1 and "takes no summarizer model" in found[0], found


def test_auto_is_shared_where_the_conversation_s_own_cache_can_serve_the_summary() -> None:
    """`auto` resolves once (`Summarizer.resolved`): `shared` for the route's own model on a
    provider route without memory extraction, else ctxproxy's own summarizer (`text`); with a
    summarizer model it is valid (unlike an explicit `shared`) and means `text`."""
    config = parse_config({"routes": [route("r")]}, "cfg.yaml", {})
    auto = config.policy_for(config.routes[0]).summarizer
    assert auto.resolved() == "shared"
    assert auto.resolved(litellm=True) == "text" and auto.resolved(extraction=True) == "text"
    small = {"summarizer": {"model": "openai/gpt-4o-mini"}}
    config = parse_config({"routes": [route("r")], "policies": {"default": small}}, "cfg.yaml", {})
    assert config.policy_for(config.routes[0]).summarizer.resolved() == "text"
    for mode in ("text", "native", "shared"):  # an explicit mode stays what it says, fallbacks counted at run time
        explicit = {"summarizer": {"mode": mode}}
        config = parse_config({"routes": [route("r")], "policies": {"default": explicit}}, "cfg.yaml", {})
        assert config.policy_for(config.routes[0]).summarizer.resolved(litellm=True, extraction=True) == mode


def test_memory_setting() -> None:
    """Off by default; every field validated at load, one problem line each."""
    config = parse_config({"routes": [route("r")]}, "cfg.yaml", {})
    memory = config.policy_for(config.routes[0]).memory
    assert (memory.enabled, memory.scopes, memory.inject_tokens, memory.write) == (
        False,
        ("project", "user"),
        800,
        "model",
    )
    on = {"enabled": "auto", "scopes": ["tenant"], "project": {"sources": ["system"], "pattern": "repo: (\\S+)"}}
    config = parse_config({"routes": [route("r")], "policies": {"default": {"memory": on}}}, "cfg.yaml", {})
    assert config.policy_for(config.routes[0]).memory.project.pattern == "repo: (\\S+)"
    bad = {
        "enabled": "sometimes",
        "scopes": ["project", "team"],
        "project": {"sources": ["cwd"], "pattern": "("},
        "inject_tokens": -1,
        "write": "always",
        "unconfirmed": "show",
    }
    found = problems({"routes": [route("r")], "policies": {"default": {"memory": bad}}})
    for field in ("enabled", "scopes", "sources", "pattern", "inject_tokens", "write", "unconfirmed"):
        assert any(f"memory.{field}" in line or f".{field}" in line for line in found), (field, found)
    same = {"memory": {"enabled": True, "tool_name": "ctxproxy_recall"}}
    found = problems({"routes": [route("r")], "policies": {"default": same}})
    assert any("memory.tool_name must differ from recall.tool_name" in line for line in found), found
    assert problems({"routes": [route("r")], "policies": {"default": {"memory": {"scopes": []}}}})


def test_config_is_frozen() -> None:
    config = parse_config({"routes": [route("r")]}, "cfg.yaml", {})
    with pytest.raises(pydantic.ValidationError):
        config.store = "sqlite:///other.db"  # type: ignore[misc]


def test_env_interpolation() -> None:
    config = parse_config(
        {
            "store": "sqlite:///${DATA}/ctx.db",
            "routes": [{"name": "r", "upstream": {"base_url": "https://${HOST}:${PORT}/v1"}}],
        },
        "cfg.yaml",
        {"DATA": "/var/lib", "HOST": "llm.internal", "PORT": "8443"},
    )
    assert config.store == "sqlite:////var/lib/ctx.db"
    assert config.routes[0].upstream.base_url == "https://llm.internal:8443/v1"


def test_env_interpolation_in_lists() -> None:
    config = parse_config(
        {"routes": [route("r")], "policies": {"default": {"tool_results": {"exclude_tools": ["${T}", "b"]}}}},
        "cfg.yaml",
        {"T": "bash"},
    )
    assert config.policies["default"].tool_results.exclude_tools == ("bash", "b")


def test_env_interpolation_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXPROXY_TEST_HOST", "from-os.test")
    config = parse_config({"routes": [{"name": "r", "upstream": {"base_url": "http://${CTXPROXY_TEST_HOST}"}}]})
    assert config.routes[0].upstream.base_url == "http://from-os.test"


def test_missing_env_var_is_a_problem_line() -> None:
    assert problems({"routes": [{"name": "r", "upstream": {"base_url": "https://${NOPE_HOST}/v1"}}]}) == [
        "cfg.yaml: routes.0.upstream.base_url: environment variable NOPE_HOST is not set"
    ]


def test_every_missing_env_var_is_reported() -> None:
    assert problems({"store": "sqlite:///${A}", "routes": [route("r", model="${B}")]}) == [
        "cfg.yaml: store: environment variable A is not set",
        "cfg.yaml: routes.0.match.model: environment variable B is not set",
    ]


def test_unknown_policy() -> None:
    assert problems({"routes": [{**route("r"), "policy": "fast"}], "policies": {"default": {}, "slow": {}}}) == [
        "cfg.yaml: routes.0.policy: unknown policy 'fast' (defined: default, slow)"
    ]


def test_duplicate_route_names() -> None:
    assert problems({"routes": [route("a"), route("b"), route("a")]}) == [
        "cfg.yaml: routes.2.name: duplicate route name 'a'"
    ]


@pytest.mark.parametrize("url", ["ftp://x.test", "api.openai.com/v1", "https://", "http:///v1", ""])
def test_bad_url(url: str) -> None:
    lines = problems({"routes": [{"name": "r", "upstream": {"base_url": url}}]})
    assert lines[0] == (
        f"cfg.yaml: routes.0.upstream.base_url: must be an http(s) URL such as https://api.openai.com/v1, got {url!r}"
    )


def test_route_problem_is_reported_alone() -> None:
    # One line per problem: a bad field inside the only route must not also claim the list is empty.
    assert problems({"routes": [{"name": "r", "upstream": {"base_url": "ftp://x.test"}}]}) == [
        "cfg.yaml: routes.0.upstream.base_url: must be an http(s) URL such as https://api.openai.com/v1, "
        "got 'ftp://x.test'"
    ]


@pytest.mark.parametrize(("trigger", "target"), [(0.5, 0.5), (0.5, 0.6)])
def test_target_not_below_trigger(trigger: float, target: float) -> None:
    assert problems({"routes": [route("r")], "policies": {"default": {"trigger": trigger, "target": target}}}) == [
        f"cfg.yaml: policies.default: target ({target}) must be below trigger ({trigger})"
    ]


def test_max_output_not_below_window() -> None:
    assert problems(
        {"routes": [route("r")], "policies": {"default": {"context_window": 1000, "max_output_tokens": 1000}}}
    ) == ["cfg.yaml: policies.default: max_output_tokens must be smaller than context_window"]


def test_unknown_keys_rejected() -> None:
    assert problems({"routes": [route("r")], "polices": {}}) == ["cfg.yaml: polices: Extra inputs are not permitted"]


def test_bad_store_url() -> None:
    assert problems({"routes": [route("r")], "store": "mysql://db"}) == [
        "cfg.yaml: store: must be sqlite:///PATH, redis://HOST:PORT/DB, redis+cluster://HOST:PORT[,HOST:PORT...] "
        "or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
    ]


def test_no_routes_and_not_a_mapping() -> None:
    (line,) = problems({"routes": []})
    assert line.startswith("cfg.yaml: routes: ") and "at least 1 item" in line
    (line,) = problems({})
    assert line == "cfg.yaml: routes: Field required"
    assert problems(["routes"]) == ["cfg.yaml: the top level must be a mapping"]
    assert problems(None) == ["cfg.yaml: the top level must be a mapping"]


def test_shadow_is_off_by_default_and_validated() -> None:
    config = parse_config({"routes": [route("r")]}, "cfg.yaml", {})
    assert not config.policies["default"].shadow.enabled
    shadow = {"rate": 1.5, "max_usd_per_day": -1, "min_interval_s": 0, "sample": "all"}
    assert problems({"routes": [route("r")], "policies": {"default": {"shadow": shadow}}}) == [
        "cfg.yaml: policies.default.shadow.rate: Input should be less than or equal to 1",
        "cfg.yaml: policies.default.shadow.max_usd_per_day: Input should be greater than or equal to 0",
        "cfg.yaml: policies.default.shadow.sample: Extra inputs are not permitted",
    ]


def test_invalid_pin_regex() -> None:
    (line,) = problems({"routes": [route("r")], "policies": {"default": {"pins": {"patterns": ["("]}}}})
    assert line.startswith("cfg.yaml: policies.default.pins.patterns: invalid regex '(':")


# -- routing --------------------------------------------------------------------------------------

ROUTES = {
    "routes": [
        route("embeddings", path="/v1/embeddings"),
        route("claude", model="claude-*"),
        route("gpt4", model="gpt-4*"),
        route("gpt", model="gpt-*"),
        route("exact", model="o3"),
    ]
}


@pytest.mark.parametrize(
    ("path", "model", "expected"),
    [
        ("/v1/chat/completions", "claude-3-5-sonnet", "claude"),
        ("/v1/chat/completions", "gpt-4o-mini", "gpt4"),  # first match wins over the later gpt-*
        ("/v1/chat/completions", "gpt-3.5-turbo", "gpt"),
        ("/v1/chat/completions", "o3", "exact"),
        ("/v1/chat/completions", "o3-mini", None),
        ("/v1/chat/completions", "GPT-4o", None),  # case-sensitive
        ("/v1/chat/completions", "my-gpt-4o", None),  # the glob is anchored
        ("/v1/embeddings", "text-embedding-3-small", "embeddings"),
        ("/v1/embeddings", "gpt-4o", "embeddings"),  # earlier route with a path match wins
    ],
)
def test_route_for(path: str, model: str, expected: str | None) -> None:
    config = parse_config(ROUTES, "cfg.yaml", {})
    found = config.route_for(path, model)
    assert (found.name if found else None) == expected


def test_route_path_must_match_exactly() -> None:
    config = parse_config({"routes": [route("chat", path="/v1/chat/completions")]}, "cfg.yaml", {})
    assert config.route_for("/v1/chat/completions", "x") is not None
    assert config.route_for("/v1/chat/completions/", "x") is None
    assert config.route_for("/v1/embeddings", "x") is None


def test_catch_all_first_shadows_everything() -> None:
    config = parse_config({"routes": [route("all"), route("gpt", model="gpt-*")]}, "cfg.yaml", {})
    assert config.route_for("/v1/chat/completions", "gpt-4o").name == "all"  # type: ignore[union-attr]


# -- check-config CLI -----------------------------------------------------------------------------


def check_config(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CTXTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "check-config", str(path)],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


GOOD_YAML = """\
store: sqlite:///${CTXTEST_DIR}/ctx.db
admin_token_env: CTXTEST_ADMIN
open_access: true
routes:
  - name: main
    match: {model: "gpt-*"}
    upstream: {base_url: "https://api.openai.com/v1", api_key_env: CTXTEST_KEY}
    policy: small
  - name: local
    match: {model: "*", path: /v1/chat/completions}
    upstream: {base_url: "http://127.0.0.1:8000/v1"}
policies:
  default: {}
  small:
    {context_window: 16000, trigger: 0.75, target: 0.5, keep_recent_tokens: 4000,
     shadow: {rate: 0.05, max_usd_per_day: 2.5, min_interval_s: 10}}
"""


def test_check_config_ok(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD_YAML)
    result = check_config(path, {"CTXTEST_DIR": str(tmp_path), "CTXTEST_KEY": "sk-secret-value-123"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"store: sqlite:///{tmp_path}/ctx.db",
        "admin API: on when $CTXTEST_ADMIN is set",
        "open access: callers without a client key may use routes with the operator's key",
        "route main: model gpt-* -> https://api.openai.com/v1 (key from $CTXTEST_KEY); policy small "
        "(window 16000, trigger 0.75, keep_recent_tokens 4000; shadow 0.05 of requests, at most $2.5/day, 10s apart)",
        "route local: model *, path /v1/chat/completions -> http://127.0.0.1:8000/v1 (client's own key); "
        "policy default (window model default, trigger 0.8, keep_recent_tokens 20000; shadow off)",
    ]
    assert "sk-secret-value-123" not in result.stdout + result.stderr


def test_check_config_missing_key_env(tmp_path: Path) -> None:
    path = tmp_path / "nokey.yaml"
    path.write_text(GOOD_YAML)
    result = check_config(path, {"CTXTEST_DIR": str(tmp_path)})
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{path}: routes.0.upstream.api_key_env: environment variable CTXTEST_KEY is not set"
    ]


def test_check_config_problems(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("routes:\n  - name: a\n    upstream: {base_url: 'https://${CTXTEST_MISSING}/v1'}\n")
    result = check_config(path, {})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{path}: routes.0.upstream.base_url: environment variable CTXTEST_MISSING is not set"
    ]
    path.write_text("routes:\n  - name: a\n    upstream: {base_url: 'https://x.test'}\n    policy: nope\n")
    result = check_config(path, {})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"{path}: routes.0.policy: unknown policy 'nope' (defined: default)"]


def test_check_config_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    result = check_config(missing, {})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"{missing}: cannot read: No such file or directory"]
    broken = tmp_path / "broken.yaml"
    broken.write_text("routes: [\n")
    result = check_config(broken, {})
    assert result.returncode == 1
    assert result.stderr.startswith(f"{broken}: invalid YAML:")


def test_per_tool_rules_load_and_the_documented_ones_are_valid() -> None:
    import re

    import yaml

    from policies.config import ToolRule

    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    block = re.search(r"## Per-tool rules.*?```yaml\n(.*?)```", page, re.S)
    assert block is not None
    documented = yaml.safe_load(block.group(1))["policies"]
    routes = [{**route(name), "policy": name} for name in documented]
    config = parse_config({"routes": routes, "policies": documented}, "cfg.yaml", {})
    claude = config.policies["claude-code"].tool_results.rules
    assert claude[0] == ToolRule("Task", "keep") and ToolRule("mcp__*", max_chars=1000) in claude
    assert {"codex", "pi"} <= set(config.policies)
    bad = {"tool_results": {"rules": [{"tool": "Read"}, {"tool": "x", "action": "keep", "keep_last_n": 2}]}}
    assert problems({"routes": [route("r")], "policies": {"default": bad}}) == [
        "cfg.yaml: policies.default.tool_results.rules.1.action: "
        "a kept tool's results are never trimmed: max_chars and keep_last_n do not apply"
    ]
    assert problems(
        {"routes": [route("r")], "policies": {"default": {"tool_results": {"rules": [{"tool": "x", "colour": 1}]}}}}
    ) == ["cfg.yaml: policies.default.tool_results.rules.0.colour: Extra inputs are not permitted"]

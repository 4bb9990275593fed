"""`proxy/modes.py`, pure: which `X-Ctxproxy-Mode` a route takes, the answer's headers, and the
policy's `modes` setting as the config loader validates it."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config_file import parse_config
from proxy.errors import BadRequest, ConfigError
from proxy.modes import call_headers, mode_of
from proxy.upstream.base import relayed_response_headers, upstream_request_headers


def config(policy: dict[str, Any] | None = None) -> Any:
    route = {"name": "main", "upstream": {"base_url": "https://api.example.test/v1"}}
    return parse_config({"routes": [route], "policies": {"default": policy or {}}}, "cfg.yaml", {})


def test_both_modes_are_allowed_by_default_and_the_header_is_case_insensitive() -> None:
    c = config()
    route, policy = c.routes[0], c.policy_for(c.routes[0])
    assert policy.modes == ("passthrough", "observe")
    assert mode_of({}, route, policy) is None
    assert mode_of({"X-Ctxproxy-Mode": " Observe "}, route, policy) == "observe"
    assert mode_of({"X-Ctxproxy-Mode": "passthrough"}, route, policy) == "passthrough"


@pytest.mark.parametrize(
    ("modes", "asked", "code", "says"),
    [
        (["observe"], "passthrough", "mode_not_allowed", "policy default allows: observe"),
        ([], "observe", "mode_not_allowed", "allows: none"),
        (None, "bypass", "invalid_mode", "must be one of passthrough, observe"),
        (None, "", "invalid_mode", "got ''"),
    ],
)
def test_a_refused_mode_is_a_400_that_says_what_to_do(modes: Any, asked: str, code: str, says: str) -> None:
    c = config({} if modes is None else {"modes": modes})
    with pytest.raises(BadRequest) as info:
        mode_of({"X-Ctxproxy-Mode": asked}, c.routes[0], c.policy_for(c.routes[0]))
    assert info.value.status == 400 and info.value.code == code and info.value.param == "X-Ctxproxy-Mode"
    assert says in info.value.message and "Leave the header out" in info.value.message


@pytest.mark.parametrize(
    ("modes", "problem"),
    [
        (["sideways"], "cfg.yaml: policies.default.modes.0: Input should be 'passthrough' or 'observe'"),
        (["observe", "observe"], "cfg.yaml: policies.default: modes lists a mode twice"),
        ("observe", "cfg.yaml: policies.default.modes: Input should be a valid tuple"),
    ],
)
def test_the_loader_refuses_bad_modes(modes: Any, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        config({"modes": modes})
    assert info.value.problems == [problem]


def test_call_headers() -> None:
    assert call_headers("c_1", "b_1", None, None) == [("X-Ctxproxy-Conversation", "c_1"), ("X-Ctxproxy-Branch", "b_1")]
    projection = {"client_tokens": 900, "sent_tokens": 300, "checkpoint_generation": 2}
    assert call_headers("c_1", "b_1", projection, "observe")[2:] == [
        ("X-Ctxproxy-Client-Tokens", "900"),
        ("X-Ctxproxy-Sent-Tokens", "300"),
        ("X-Ctxproxy-Checkpoint", "2"),
        ("X-Ctxproxy-Mode", "observe"),
    ]
    unapplied = {"client_tokens": 5, "sent_tokens": 5, "checkpoint_generation": None}
    assert ("X-Ctxproxy-Checkpoint", "none") in call_headers("c_1", "b_1", unapplied, None)


def test_our_headers_never_cross_the_proxy() -> None:
    client = {"X-Ctxproxy-Mode": "observe", "x-ctxproxy-anything": "1", "Content-Type": "application/json"}
    assert upstream_request_headers(client, None, frozenset()) == {"Content-Type": "application/json"}
    upstream = {"x-ctxproxy-conversation": "c_inner", "x-request-id": "r1"}
    assert relayed_response_headers(upstream) == [("x-request-id", "r1")]

"""The configs and deployment files the repository ships: each one serves every client API on its
provider's host, and the compose files and nginx leave room for the graceful drain."""

from __future__ import annotations

import re

import pytest
import yaml

from proxy.config import load_config
from proxy.protocols import WIRES
from tests.support.proxy_process import REPO

SHIPPED = ["config.example.yaml", "deploy/config.replicas.yaml", "deploy/config.cluster.yaml"]
HOSTS = {
    "anthropic": "https://api.anthropic.com",
    "openai_chat": "https://api.openai.com/v1",
    "openai_responses": "https://api.openai.com/v1",
    "openai_responses_compact": "https://api.openai.com/v1",
    "gemini": "https://generativelanguage.googleapis.com",
}
MODELS = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}


@pytest.mark.parametrize("name", SHIPPED)
def test_each_wire_of_a_shipped_config_goes_to_its_providers_host(name: str) -> None:
    config = load_config(REPO / name)
    for wire in WIRES:  # each of a wire's paths (its count path too) is routed as its `path`
        route = config.route_for(wire.path, MODELS.get(wire.name, "gpt-5"))
        assert route is not None, (name, wire.path)
        assert route.upstream.base_url == HOSTS[wire.name], (name, wire.path, route.name)


@pytest.mark.parametrize("name", SHIPPED[1:])
def test_the_deployment_configs_have_the_example_route_table(name: str) -> None:
    example, deployed = load_config(REPO / SHIPPED[0]), load_config(REPO / name)
    assert deployed.routes == example.routes


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.cluster.yml"])
def test_compose_gives_the_drain_its_grace_before_killing(name: str) -> None:
    compose = yaml.safe_load((REPO / name).read_text())
    for service in ("ctxproxy-1", "ctxproxy-2"):
        grace = compose["services"][service].get("stop_grace_period")
        assert grace is not None, f"{name}: {service} is killed at Docker's default 10 s"
        seconds = int(re.fullmatch(r"(\d+)s", grace).group(1))
        mounted = compose["services"][service]["volumes"][0].split(":")[0]
        shutdown_grace = load_config(REPO / mounted).server.shutdown_grace
        assert seconds > shutdown_grace, (name, seconds, shutdown_grace)


def test_nginx_sends_a_draining_replicas_503_to_the_next_replica() -> None:
    conf = (REPO / "deploy" / "nginx.conf").read_text()
    directives = {
        line.split()[0]: line.split()[1:]
        for line in (raw.split("#")[0].strip().rstrip(";") for raw in conf.splitlines())
        if line
    }
    retried = directives["proxy_next_upstream"]
    assert "http_503" in retried and "non_idempotent" in retried, retried  # model calls are POSTs
    assert directives.get("proxy_request_buffering") != ["off"], "an unbuffered body cannot be sent again"

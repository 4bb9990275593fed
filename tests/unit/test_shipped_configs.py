"""The configs and deployment files the repository ships: each one serves every client API on its
provider's host, and the compose files and nginx leave room for the graceful drain."""

from __future__ import annotations

import re

import pytest
import yaml

from proxy.config_file import load_config
from proxy.protocols import WIRES
from tests.support.proxy_process import REPO

SHIPPED = [
    "config.example.yaml",
    "deploy/config.replicas.yaml",
    "deploy/config.cluster.yaml",
    "deploy/config.postgres.yaml",
]
HOSTS = {
    "anthropic": "https://api.anthropic.com",
    "openai_chat": "https://api.openai.com/v1",
    "openai_responses": "https://api.openai.com/v1",
    "openai_responses_compact": "https://api.openai.com/v1",
    "gemini": "https://generativelanguage.googleapis.com",
}
MODELS = {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}


@pytest.fixture(autouse=True)
def _postgres_password(monkeypatch: pytest.MonkeyPatch) -> None:
    # deploy/config.postgres.yaml reads the database password from the environment, as compose sets it
    monkeypatch.setenv("POSTGRES_PASSWORD", "from-the-environment")


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


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.cluster.yml", "docker-compose.postgres.yml"])
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


def test_postgres_compose_balances_ready_replicas_of_one_database() -> None:
    """docker-compose.postgres.yml: both replicas read the config whose store is the compose's
    PostgreSQL (user, database, the password from the same variable), each is healthy only while
    its /readyz answers 200, and nginx waits for both to be healthy."""
    compose = yaml.safe_load((REPO / "docker-compose.postgres.yml").read_text())
    services = compose["services"]
    database = services["postgres"]["environment"]
    for name in ("ctxproxy-1", "ctxproxy-2"):
        service = services[name]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert any("/readyz" in part for part in service["healthcheck"]["test"]), service["healthcheck"]
        assert services["nginx"]["depends_on"][name]["condition"] == "service_healthy"
        assert service["environment"]["POSTGRES_PASSWORD"] == database["POSTGRES_PASSWORD"]
        mounted = service["volumes"][0].split(":")[0]
        store = load_config(REPO / mounted).store
        assert store.startswith(f"postgresql://{database['POSTGRES_USER']}:from-the-environment@postgres:5432/")
        assert store.split("?")[0].endswith("/" + database["POSTGRES_DB"])
    assert "8787:8787" in services["nginx"]["ports"]

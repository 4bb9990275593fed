"""The quick start as shipped: config.example.yaml serves every client API, `/` answers a hint."""

from __future__ import annotations

import json
from typing import Any

import httpx
import yaml

from proxy.config_file import load_config
from tests.support.proxy_process import REPO


def test_example_config_routes_each_api_to_its_provider():
    config = load_config(REPO / "config.example.yaml")
    anthropic = config.route_for("/v1/messages", "claude-sonnet-4-5")
    assert anthropic is not None and anthropic.upstream.base_url == "https://api.anthropic.com"
    gemini = config.route_for("/v1beta/models", "gemini-2.5-flash")
    assert gemini is not None and gemini.upstream.base_url == "https://generativelanguage.googleapis.com"
    for path in ("/v1/chat/completions", "/v1/responses"):
        route = config.route_for(path, "gpt-5")
        assert route is not None and route.upstream.base_url == "https://api.openai.com/v1"
    # the client's own key is forwarded: no operator key configured
    assert all(route.upstream.api_key_env is None for route in config.routes)
    assert "x-claude-code-session-id" in config.session_headers


def test_root_answers_a_one_line_hint(proxy):
    p = proxy()
    got = httpx.get(p.url + "/", timeout=30)
    assert got.status_code == 200
    assert got.headers["content-type"] == "application/json"
    assert "\n" not in got.text.strip()
    assert json.loads(got.text)["service"] == "ctxproxy"
    head = httpx.head(p.url + "/", timeout=30)
    assert head.status_code == 200 and head.content == b""


def shipped(openai_url: str, anthropic_url: str) -> dict[str, Any]:
    """config.example.yaml as shipped, its upstreams moved to local servers (Gemini's with
    Anthropic's: these tests call neither)."""
    config = yaml.safe_load((REPO / "config.example.yaml").read_text())
    hosts = {
        "https://api.anthropic.com": anthropic_url,
        "https://generativelanguage.googleapis.com": anthropic_url,
        "https://api.openai.com/v1": openai_url,
    }
    for route in config["routes"]:
        route["upstream"]["base_url"] = hosts[route["upstream"]["base_url"]]
    return config


def test_the_openai_sdk_lists_models_on_the_shipped_config(proxy, upstream, closed_port, api_key):
    """The first route is Anthropic's: the model list must still come from the OpenAI route."""
    config = shipped(upstream.base_url, f"http://127.0.0.1:{closed_port}")
    p = proxy(routes=config["routes"], policies=config["policies"])
    models = [m.id for m in p.client(api_key).models.list()]
    assert models == upstream.models
    listed = [r for r in upstream.requests if r.path.endswith("/models")]
    assert listed and listed[-1].headers["authorization"] == f"Bearer {api_key}"


def test_embeddings_pass_through_to_the_openai_route(proxy, upstream, closed_port, api_key):
    config = shipped(upstream.base_url, f"http://127.0.0.1:{closed_port}")
    p = proxy(routes=config["routes"], policies=config["policies"])
    got = p.client(api_key).embeddings.create(model="text-embedding-3-small", input=["hello", "world!"])
    assert [d.embedding[0] for d in got.data] == [5.0, 6.0]
    assert got.usage.prompt_tokens == 3  # "hello", "world" "!"
    sent = [r for r in upstream.requests if r.path.endswith("/embeddings")][-1]
    assert sent.headers["authorization"] == f"Bearer {api_key}"
    assert sent.body["input"] == ["hello", "world!"]
    refused = httpx.post(p.base_url + "/embeddings", content=b"{", headers={"Authorization": f"Bearer {api_key}"})
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"

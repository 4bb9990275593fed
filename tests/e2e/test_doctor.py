"""`ctxproxy doctor` against scripted upstreams: the store, each route's upstream and key, the
summarizer, the windows, one line per check, exit 1 when any failed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml

from tests.support.anthropic_upstream import AnthropicUpstream
from tests.support.proxy_process import REPO, subprocess_env
from tests.support.upstream_server import UpstreamServer

GOOD = "sk-doctor-good-0123456789"


@pytest.fixture(scope="module")
def keyed() -> Iterator[UpstreamServer]:
    server = UpstreamServer(api_key=GOOD)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicUpstream]:
    server = AnthropicUpstream(api_key=GOOD)
    server.start()
    yield server
    server.stop()


def route(name: str, base_url: str, key_env: str | None = None, path: str | None = None) -> dict:
    upstream: dict = {"base_url": base_url, "timeouts": {"connect": 2}}
    if key_env:
        upstream["api_key_env"] = key_env
    match = {"model": "*", **({"path": path} if path else {})}
    return {"name": name, "match": match, "upstream": upstream}


def doctor(tmp_path, config: dict, **env: str) -> tuple[int, dict[str, str]]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "doctor", str(path)],
        cwd=REPO,
        env={**subprocess_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    lines = {}
    for line in done.stdout.splitlines():
        verdict, rest = line.split(" ", 1)
        what, _, detail = rest.strip().partition(": ")
        lines[what] = f"{verdict} {detail}"
    return done.returncode, lines


def test_every_check_passes_against_working_upstreams(tmp_path, keyed, claude, upstream):
    config = {
        "store": f"sqlite:///{tmp_path}/doctor.db",
        "open_access": True,
        "routes": [
            route("claude", claude.url, "DOCTOR_KEY", path="/v1/messages"),
            route("keyed", keyed.base_url, "DOCTOR_KEY"),
            route("forwarding", upstream.base_url),
        ],
        "policies": {"default": {"context_window": 100000}},
    }
    status, lines = doctor(tmp_path, config, DOCTOR_KEY=GOOD)
    assert status == 0, lines
    assert lines["store"].startswith("ok ") and "takes a write" in lines["store"]
    assert lines["route claude"].startswith("ok ") and "accepts the key from $DOCTOR_KEY" in lines["route claude"]
    assert lines["route keyed"].startswith("ok ") and "accepts the key" in lines["route keyed"]
    assert lines["route forwarding"].startswith("ok ") and "own key is forwarded" in lines["route forwarding"]
    assert lines["policy 'default' summarizer"].startswith("ok ")
    assert lines["window"].startswith("ok ") and "100,000 (policy context_window)" in lines["window"]
    assert GOOD not in str(lines)


def test_a_rejected_key_an_unreachable_upstream_and_an_assumed_window_are_said(tmp_path, keyed, claude, closed_port):
    config = {
        "store": f"sqlite:///{tmp_path}/doctor.db",
        "open_access": True,
        "routes": [
            route("claude", claude.url, "DOCTOR_KEY", path="/v1/messages"),
            route("keyed", keyed.base_url, "DOCTOR_KEY"),
            route("down", f"http://127.0.0.1:{closed_port}/v1"),
        ],
        "policies": {"default": {"summarizer": {"model": "openai/sum", "base_url": keyed.base_url}}},
    }
    wrong = "sk-doctor-wrong-0123456789"
    status, lines = doctor(tmp_path, config, DOCTOR_KEY=wrong)
    assert status == 1, lines
    assert lines["store"].startswith("ok ")
    assert (
        lines["route claude"].startswith("FAIL ")
        and "rejects the key from $DOCTOR_KEY (HTTP 401" in lines["route claude"]
    )
    assert lines["route keyed"].startswith("FAIL ") and "rejects the key" in lines["route keyed"]
    assert lines["route down"].startswith("FAIL ") and "unreachable" in lines["route down"]
    assert lines["policy 'default' summarizer"].startswith("ok ")  # keyless: it answers
    assert wrong not in str(lines)


def test_a_store_that_cannot_be_opened_fails(tmp_path, closed_port, upstream):
    config = {"store": f"redis://127.0.0.1:{closed_port}/0", "routes": [route("forwarding", upstream.base_url)]}
    status, lines = doctor(tmp_path, config)
    assert status == 1 and lines["store"].startswith("FAIL ") and str(closed_port) in lines["store"], lines
    assert lines["route forwarding"].startswith("ok ")

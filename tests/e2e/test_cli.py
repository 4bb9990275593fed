"""`python -m proxy.cli check-config`: resolved routes, or one line per problem and non-zero exit."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.support.proxy_process import REPO, default_config, subprocess_env


def check_config(tmp_path, config: dict) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "check-config", str(path)],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_config_valid_prints_routes_without_secrets(tmp_path):
    config = default_config("http://127.0.0.1:9/v1", 10)
    config["store"] = f"sqlite:///{tmp_path}/x.db"
    r = check_config(tmp_path, config)
    assert r.returncode == 0, r.stderr
    for route in config["routes"]:
        assert route["name"] in r.stdout
    assert "sk-upstream-secret" not in r.stdout + r.stderr


def test_check_config_reports_each_problem(tmp_path):
    config = default_config("not-a-url", 10)
    config["store"] = f"sqlite:///{tmp_path}/x.db"
    config["routes"][1]["policy"] = "nonexistent"
    r = check_config(tmp_path, config)
    assert r.returncode != 0
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    assert any("base_url" in line for line in lines), lines
    assert any("nonexistent" in line for line in lines), lines
    assert not any(line.startswith("Traceback") for line in lines), lines

"""`python -m proxy.cli check-config`: resolved routes, or one line per problem and non-zero exit."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

import yaml

from proxy.cli import parser
from tests.support.proxy_process import REPO, default_config, subprocess_env


def check_config(tmp_path, config: dict, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "check-config", str(path)],
        cwd=REPO,
        env=env or subprocess_env(),
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


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", *args],
        cwd=REPO,
        env=env or subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr


def test_a_sqlite_store_in_a_missing_directory_is_refused_not_created(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    config = default_config("http://127.0.0.1:9/v1", 10)
    config["store"] = f"sqlite:///{missing}/x.db"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    checked = cli("check-config", str(path))
    assert checked.returncode == 1 and str(missing) in checked.stderr, checked.stderr
    served = cli("serve", "--config", str(path), "--port", "0")
    assert served.returncode == 1 and str(missing) in served.stderr, served.stderr
    no_traceback(served)
    assert not (tmp_path / "no").exists(), "the directory was created"


def test_an_unreachable_redis_at_start_is_one_line_not_a_traceback(tmp_path, closed_port):
    config = default_config("http://127.0.0.1:9/v1", 10)
    config["store"] = f"redis://127.0.0.1:{closed_port}/0"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    served = cli("serve", "--config", str(path), "--port", "0")
    assert served.returncode == 1
    no_traceback(served)
    lines = served.stderr.strip().splitlines()
    assert len(lines) == 1 and "store" in lines[0] and str(closed_port) in lines[0], lines


def test_a_litellm_summarizer_without_a_key_fails_check_config(tmp_path):
    config = default_config("http://127.0.0.1:9/v1", 10)
    config["store"] = f"sqlite:///{tmp_path}/x.db"
    config["policies"]["default"]["summarizer"] = {"model": "anthropic/claude-haiku-4-5"}
    env = {k: v for k, v in subprocess_env().items() if k != "ANTHROPIC_API_KEY"}
    r = check_config(tmp_path, config, env)
    assert r.returncode == 1
    assert "summarizer" in r.stderr and "ANTHROPIC_API_KEY" in r.stderr, r.stderr
    env["SUMMARY_KEY"] = "sk-summary-key-0123"
    config["policies"]["default"]["summarizer"]["api_key_env"] = "SUMMARY_KEY"
    assert check_config(tmp_path, config, env).returncode == 0


def test_a_yaml_error_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("store: sqlite:///x.db\nroutes: [\n  - name: a\n")
    r = cli("check-config", str(path))
    assert r.returncode == 1
    no_traceback(r)
    assert "<unicode string>" not in r.stderr and f'"{path}", line' in r.stderr, r.stderr


def test_check_config_into_a_closed_pipe_ends_quietly():
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "check-config", "config.example.yaml"],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written (`| head` that has its line)
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "BrokenPipeError" not in err and "Traceback" not in err, err


def test_help_describes_every_option_and_version_is_printed():
    assert cli("--version").stdout.strip() == f"ctxproxy {version('ctxproxy')}"
    top = cli("--help").stdout
    assert all(command in top for command in ("serve", "check-config", "doctor", "replay")), top
    commands = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        assert sub.description, name
        for action in sub._actions:
            assert action.help, (name, action.option_strings or action.dest)

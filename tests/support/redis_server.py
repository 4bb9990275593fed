"""Private `redis-server` processes for the tests: one per session (the contract suite), and extra
ones for tests that stop and restart their server. Nothing global is started or touched; every
process is stopped by its own PID."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import redis

MISSING = (
    "redis-server is not on PATH: the Redis store tests start their own servers. Install it "
    "(Debian/Ubuntu: apt-get install -y redis-server; .ci/run does this) and run the tests again."
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """``redis-server --port P --save '' --appendonly no --daemonize no`` on 127.0.0.1."""

    def __init__(self, port: int | None = None, password: str | None = None) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.fail(MISSING, pytrace=False)
        self.port = port or free_port()
        self.password = password
        self.dir = Path(tempfile.mkdtemp(prefix="ctxproxy-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        assert self.binary is not None
        cmd = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.dir),
        ]
        if self.password:
            cmd += ["--requirepass", self.password]
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 -- closed with the process
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=1)
                try:
                    if client.ping():
                        return self
                finally:
                    client.close()
            except redis.RedisError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} not ready after 10 s:\n{self.log()}")

    def log(self) -> str:
        try:
            return (self.dir / "redis.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # SIGTERM to this PID only
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, decode_responses=True)


_session: RedisServer | None = None


def set_session_server(server: RedisServer | None) -> None:
    global _session
    _session = server


def session_server() -> RedisServer:
    if _session is None:
        raise RuntimeError("the redis_server fixture has not started a server in this session")
    return _session

"""Private `redis-server` processes for the tests: one per session (the contract suite), and extra
ones for tests that stop and restart their server. Nothing global is started or touched; every
process is stopped by its own PID, and its temp directory is deleted when it stops (a
``persistent`` server keeps it, and its append-only file, until :meth:`RedisServer.close`)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import redis

from tests.support.ports import free_port
from tests.support.waiting import wait_until

MISSING = (
    "redis-server is not on PATH: the Redis store tests start their own servers. Install it "
    "(Debian/Ubuntu: apt-get install -y redis-server; .ci/run does this) and run the tests again."
)


class RedisServer:
    """``redis-server --port P --save '' --daemonize no`` on 127.0.0.1, its files in a temp dir.

    Without ``persistent`` the append-only file is off and :meth:`stop` deletes the directory (a
    restart is a fresh, empty server). With it, AOF is on (``appendfsync always``) and the
    directory stays across :meth:`stop` / :meth:`start`, so the data survives like a production
    Redis's; :meth:`close` stops the server and deletes it.
    """

    def __init__(self, port: int | None = None, password: str | None = None, persistent: bool = False) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.fail(MISSING, pytrace=False)
        self.port = port or free_port()
        self.password = password
        self.persistent = persistent
        self.dir: Path | None = None  # made by start(), so a server never started leaves nothing
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        assert self.binary is not None
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="ctxproxy-redis-"))
        aof = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *aof]
        cmd += ["--daemonize", "no", "--dir", str(self.dir)]
        if self.password:
            cmd += ["--requirepass", self.password]
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 -- closed with the process
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}:\n{self.log()}")
            client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=1)
            try:
                return bool(client.ping())
            finally:
                client.close()

        try:
            wait_until(
                answers, timeout=10, interval=0.02, what=f"redis-server on port {self.port}", ignore=(redis.RedisError,)
            )
        except AssertionError as exc:
            log_text = self.log()
            self.stop()
            raise RuntimeError(f"{exc}\n{log_text}") from None
        return self

    def log(self) -> str:
        if self.dir is None:
            return ""
        try:
            return (self.dir / "redis.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the process (SIGTERM to this PID only); delete the directory unless ``persistent``."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if not self.persistent:
            self._remove_dir()

    def close(self) -> None:
        """Stop the process and delete its directory, ``persistent`` or not."""
        self.stop()
        self._remove_dir()

    def _remove_dir(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

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

"""Private PostgreSQL servers for the tests: `initdb` into a temp directory, `postgres` on a free
localhost port, stopped by its own PID and the directory deleted after (as the Redis tests start
their own redis-server). One server serves the whole session (`postgres_server`); a test that
restarts or kills its server starts one of its own.

PostgreSQL refuses to run as root, and CI runs as root: then the directory is handed to the
`postgres` account (Debian's package creates it) and `initdb` and `postgres` run under it
(`subprocess.Popen(user=...)`, so the PID held is the server's own, not a wrapper's). The server
runs with `fsync=off`: a test's data need not survive the machine, only the process, and a
process crash (`kill`: SIGQUIT, PostgreSQL's immediate shutdown, no checkpoint) still loses
nothing a commit acknowledged, since the WAL reached the kernel.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ports import free_port

MISSING = (
    "PostgreSQL's initdb is not installed: the PostgreSQL store tests start their own servers. Install "
    "it (Debian/Ubuntu: apt-get install -y postgresql; .ci/run does this) and run the tests again."
)


def _bindir() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresServer:
    """One `postgres` process on 127.0.0.1, trust authentication for user `postgres` (its password
    is never checked, so tests can put one in the URL and see it kept out of errors)."""

    def __init__(self, fsync: bool = False) -> None:
        """`fsync`: as a production server runs (every commit flushed to disk) -- for
        benchmarks; the tests run without."""
        self.fsync = fsync
        bindir = _bindir()
        if bindir is None:
            pytest.fail(MISSING, pytrace=False)
        self.bindir = bindir
        self.port = free_port()
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            self._as = {"user": "postgres", "group": pwd.getpwnam("postgres").pw_gid}

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        auth = f"postgres:{password}@" if password else "postgres@"
        return f"postgresql://{auth}127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        if self.dir is None:
            # As root, under /tmp: a TMPDIR inside root's home would be closed to the postgres account.
            self.dir = Path(tempfile.mkdtemp(prefix="ctxproxy-pg-", dir="/tmp" if self._as else None))
            if self._as:
                os.chown(self.dir, pwd.getpwnam("postgres").pw_uid, self._as["group"])
            subprocess.run(
                [self.bindir / "initdb", "-D", self.dir / "data", "-U", "postgres", "-A", "trust", "-E", "UTF8"]
                + ["--no-sync", "--locale=C"],
                check=True,
                capture_output=True,
                **self._as,
            )
        log = open(self.dir / "postgres.log", "ab")  # noqa: SIM115 -- closed with the process
        if self._as:
            os.chown(self.dir / "postgres.log", pwd.getpwnam("postgres").pw_uid, self._as["group"])
        settings = ["listen_addresses=127.0.0.1", f"unix_socket_directories={self.dir}"]
        settings += [] if self.fsync else ["fsync=off"]
        settings += ["max_connections=300", "shared_buffers=32MB"]
        cmd = [str(self.bindir / "postgres"), "-D", str(self.dir / "data"), "-p", str(self.port)]
        for setting in settings:
            cmd += ["-c", setting]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **self._as)
        log.close()
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n{self.log()}")
            ready = subprocess.run(
                [self.bindir / "pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)], check=False
            )
            if ready.returncode == 0:
                return self
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"postgres on port {self.port} did not start:\n{self.log()}")
            time.sleep(0.05)

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run `sql` with psql (unaligned, tuples only); its output."""
        done = subprocess.run(
            [self.bindir / "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"]
            + ["-p", str(self.port), "-U", "postgres", "-d", database, "-c", sql],
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout

    def drop_schemas(self, prefix: str) -> None:
        """Drop every schema whose name starts with `prefix` (a test's stores)."""
        names = self.psql(f"SELECT nspname FROM pg_namespace WHERE starts_with(nspname, '{prefix}')").split()
        if names:
            self.psql("DROP SCHEMA " + ", ".join(f'"{n}"' for n in names) + " CASCADE")

    def log(self) -> str:
        try:
            return (self.dir / "postgres.log").read_text(errors="replace")[-4000:] if self.dir else ""
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGQUIT to this PID: PostgreSQL's immediate shutdown, no checkpoint (recovery replays the
        WAL at the next start); the directory stays for `start`."""
        self._signal(signal.SIGQUIT)

    def stop(self) -> None:
        """SIGINT to this PID (a fast shutdown); the directory stays for `start`."""
        self._signal(signal.SIGINT)

    def _signal(self, sig: int) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def close(self) -> None:
        """Stop the process and delete its directory."""
        self.stop()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


_session: PostgresServer | None = None


def session_postgres() -> PostgresServer:
    if _session is None:
        raise RuntimeError("the postgres_server fixture has not started a server in this session")
    return _session


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One local PostgreSQL for the whole session (tests/conftest.py exposes it)."""
    global _session
    server = PostgresServer().start()
    _session = server
    try:
        yield server
    finally:
        _session = None
        server.close()

"""Private `redis-server` processes for the tests: one per session (the contract suite), and extra
ones for tests that stop and restart their server. Nothing global is started or touched; every
process is stopped by its own PID, and its temp directory is deleted when it stops (a
``persistent`` server keeps it, and its append-only file, until :meth:`RedisServer.close`)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
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

    def __init__(
        self,
        port: int | None = None,
        password: str | None = None,
        persistent: bool = False,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.fail(MISSING, pytrace=False)
        self.port = port or free_port()
        self.password = password
        self.persistent = persistent
        self.extra = extra
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
        cmd += ["--daemonize", "no", "--dir", str(self.dir), *self.extra]
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

    def kill(self) -> None:
        """SIGKILL to this PID only (a crash: nothing flushed); the directory stays for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None

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


def dump(client: redis.Redis, key: str) -> str:
    """A key's whole value, comparable across snapshots (scores of sorted sets included)."""
    kind = client.type(key)
    if kind == "string":
        return str(client.get(key))
    if kind == "hash":
        return repr(sorted(client.hgetall(key).items()))
    if kind == "list":
        return repr(client.lrange(key, 0, -1))
    if kind == "set":
        return repr(sorted(client.smembers(key)))
    if kind == "zset":
        return repr(client.zrange(key, 0, -1, withscores=True))
    return ""


def set_session_server(server: RedisServer | None) -> None:
    global _session
    _session = server


def session_server() -> RedisServer:
    if _session is None:
        raise RuntimeError("the redis_server fixture has not started a server in this session")
    return _session


class RedisCluster:
    """Six ``redis-server --cluster-enabled yes`` processes on free ports (three primaries, three
    replicas), joined by ``redis-cli --cluster create ... --cluster-replicas 1``. Each node has its
    own temp dir (``nodes.conf``), so a killed node restarted with :meth:`restart` rejoins (as a
    replica of whoever took its slots). :meth:`stop` stops every process by its PID and deletes
    the directories. A short node timeout, so a failover takes seconds."""

    def __init__(self, node_timeout_ms: int = 2000) -> None:
        self.node_timeout_ms = node_timeout_ms
        cluster_args = (
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(node_timeout_ms),
            "--appendonly",
            "no",  # a restarted node resyncs from its primary
        )
        # persistent keeps each node's directory (nodes.conf) across a kill and restart.
        # The bus port is named (free) rather than port + 10000, which may be past 65535.
        self.nodes = [
            RedisServer(persistent=True, extra=(*cluster_args, "--cluster-port", str(free_port()))) for _ in range(6)
        ]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])

    def start(self) -> RedisCluster:
        cli = shutil.which("redis-cli")
        if cli is None:
            pytest.fail(MISSING, pytrace=False)
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
            created = subprocess.run(
                [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}\n{created.stderr}")
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self, timeout: float = 30) -> None:
        """Every live node says cluster_state:ok and sees three primaries with slots; every replica
        is in sync with its primary (and, with all six up, every primary has its replica)."""

        def ok() -> bool:
            for node in self.live():
                client = node.client()
                try:
                    if "cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                        return False
                    if len(self._primaries(client)) != 3:
                        return False
                    replication = client.info("replication")
                    if replication["role"] == "slave" and replication.get("master_link_status") != "up":
                        return False  # still syncing: a WAIT would time out, a failover lose data
                    if (
                        replication["role"] == "master"
                        and len(self.live()) == 6
                        and not replication["connected_slaves"]
                    ):
                        return False
                finally:
                    client.close()
            return True

        wait_until(ok, timeout=timeout, interval=0.1, what="the redis cluster", ignore=(redis.RedisError,))

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    @staticmethod
    def _primaries(client: redis.Redis) -> list[int]:
        ports = []
        for line in client.execute_command("CLUSTER", "NODES").splitlines():
            fields = line.split()
            if "master" in fields[2] and "fail" not in fields[2] and len(fields) > 8:
                ports.append(int(fields[1].split("@")[0].rsplit(":", 1)[1]))
        return ports

    def primaries(self) -> list[RedisServer]:
        """The live nodes that are primaries now (by the cluster's own view)."""
        client = self.live()[0].client()
        try:
            ports = set(self._primaries(client))
        finally:
            client.close()
        return [n for n in self.live() if n.port in ports]

    def node_of(self, key: str) -> RedisServer:
        """The primary serving `key`'s slot now."""
        client = self.live()[0].client()
        try:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(primary[1])
                    return next(n for n in self.nodes if n.port == port)
        finally:
            client.close()
        raise LookupError(f"no node serves {key!r}")

    def keys(self, match: str = "*") -> dict[int, list[str]]:
        """Every key matching `match` on every live primary, by port."""
        out: dict[int, list[str]] = {}
        for node in self.primaries():
            client = node.client()
            try:
                out[node.port] = sorted(client.scan_iter(match=match, count=1000))
            finally:
                client.close()
        return out

    def restart(self, node: RedisServer) -> None:
        node.start()
        self.wait_healthy()

    def stop(self) -> None:
        for node in self.nodes:
            node.close()


_session_cluster: RedisCluster | None = None


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """One local Redis Cluster for the whole session (tests/conftest.py exposes it)."""
    global _session_cluster
    cluster = RedisCluster().start()
    _session_cluster = cluster
    try:
        yield cluster
    finally:
        _session_cluster = None
        cluster.stop()


def session_cluster() -> RedisCluster:
    if _session_cluster is None:
        raise RuntimeError("the redis_cluster fixture has not started a cluster in this session")
    return _session_cluster

"""Processes the bench starts: start, wait until they answer, measure (/proc), stop by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree(pid: int) -> list[int]:
    kids = _children()
    out, todo = [], [pid]
    while todo and len(out) < 1000:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process and its descendants, from /proc/PID/stat."""
    total = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / CLK_TCK


def runqueue_wait_s(pid: int) -> float:
    """Seconds the process's main thread (an asyncio server's event loop) has spent runnable but
    waiting for a CPU (/proc/PID/schedstat, second field): time its loop could not run however
    idle the loop itself was, e.g. on a machine busy with other work."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_mb(pid: int) -> float:
    total = 0
    for p in tree(pid):
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE
        except OSError:
            continue
    return total / 2**20


@dataclass
class Proc:
    name: str
    argv: list[str]
    port: int
    health: str
    cwd: str | None = None
    env: dict[str, str] | None = None
    log: Path | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self, timeout: float = 30.0) -> None:
        out = open(self.log, "wb") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.popen = subprocess.Popen(
            self.argv, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode} at start-up; log: {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.health}", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer {self.health} within {timeout:g} s; log: {self.log}")

    def stop(self) -> None:
        """SIGTERM to the PID (and any children it started, by PID), SIGKILL after 10 s."""
        if self.popen is None or self.popen.poll() is not None:
            return
        pids = tree(self.popen.pid)
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            pass

"""A free TCP port on 127.0.0.1 for a server a test starts.

Ports come from below the kernel's ephemeral range (``ip_local_port_range``), so no outgoing
connection (a client, the proxy's own upstream connections) can take a port between the moment
it is handed out and the moment its server binds it. Each pytest-xdist worker has its own slice
of that space (up to the number of slices, 45 with Linux's default range), so two workers never
hand out the same port, and a worker hands each port out once (a port a test keeps closed, like
the session's ``closed_port``, stays closed). Within a slice the ports go round from a random
start, each one probed with a bind first (another program listening there is skipped). Where the
ephemeral range leaves no room below it, or the slice is used up, the kernel picks the port.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import socket
from pathlib import Path

SLICE = 500
FLOOR = 10_000  # below it are the well-known and registered ports other services use


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _slice() -> range | None:
    """This worker's slice: the run's own offset (from the run id xdist gives its workers, else
    this process's pid, so two runs on one machine rarely share a slice) plus the worker's index."""
    slices = (_ephemeral_low() - FLOOR) // SLICE
    if slices < 2:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
    offset = int(hashlib.sha256(run.encode()).hexdigest(), 16) % slices
    low = FLOOR + (offset + index) % slices * SLICE
    return range(low, low + SLICE)


_SLICE = _slice()
_TURN = itertools.count(random.randrange(SLICE))
_HANDED: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nothing listens on right now and that no other test of this run is handed."""
    if _SLICE is not None:
        for _ in range(SLICE):
            port = _SLICE[next(_TURN) % SLICE]
            if port not in _HANDED and _bindable(port):
                _HANDED.add(port)
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

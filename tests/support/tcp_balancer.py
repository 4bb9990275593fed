"""A tiny TCP load balancer for the rolling-restart test: each new client connection goes to the
next backend (round robin) that passes its readiness check (`GET /readyz`, polled every 50 ms,
as a load balancer's health checks do) and accepts a TCP connection; a refused connect tries the
next one, as nginx's ``proxy_next_upstream error`` does before anything was sent. Bytes are then piped
both ways unchanged until either side closes. Threads, no asyncio: it runs beside the test's
client threads."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter

import httpx

from tests.support.ports import free_port


class TcpBalancer:
    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.port = free_port()
        self.active: Counter[int] = Counter()
        """Open client connections per backend port."""
        self.refused = 0
        self.unroutable = 0
        self._next = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", self.port), backlog=128)
        self._thread = threading.Thread(target=self._accept, name="tcp-balancer", daemon=True)
        self._closed = False
        self.ready: dict[int, bool] = {}
        """The last readiness check's answer per backend port."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> TcpBalancer:
        threading.Thread(target=self._probe, daemon=True).start()
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _probe(self) -> None:
        """Readiness checks, as a load balancer's health checks: `GET /readyz` every 50 ms."""
        while not self._closed:
            for port in self.backends:
                try:
                    ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=0.5).status_code == 200
                except httpx.HTTPError:
                    ready = False
                self.ready[port] = ready
            time.sleep(0.05)

    def _connect(self) -> tuple[socket.socket, int] | None:
        with self._lock:
            start = self._next
            self._next = (self._next + 1) % len(self.backends)
        ordered = [self.backends[(start + i) % len(self.backends)] for i in range(len(self.backends))]
        # ready backends first; one failing its readiness check only when none is ready
        for port in sorted(ordered, key=lambda p: not self.ready.get(p, True)):
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=5), port
            except OSError:
                with self._lock:
                    self.refused += 1
        return None

    def _serve(self, client: socket.socket) -> None:
        connected = self._connect()
        if connected is None:
            with self._lock:
                self.unroutable += 1
            client.close()
            return
        backend, port = connected
        backend.settimeout(None)
        with self._lock:
            self.active[port] += 1
        pipe = threading.Thread(target=_pipe, args=(backend, client), daemon=True)
        pipe.start()
        _pipe(client, backend)
        pipe.join()
        with self._lock:
            self.active[port] -= 1
        client.close()
        backend.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass

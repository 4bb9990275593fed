"""`ctxproxy serve`'s server: uvicorn with the guarded request head, the edge, and a graceful drain.

uvicorn's own SIGTERM handling stops listening at once and gives running requests
`timeout_graceful_shutdown` seconds, but nothing tells a load balancer beforehand. Here the first
SIGTERM or SIGINT only starts draining (`Gate.drain`: readiness fails, new calls get 503 with
`Connection: close`); the server keeps listening so probes see the 503, and stops once no model
call is in flight or `server.shutdown_grace` has passed; then the calls still running are cut
(`Gate.cut`: a stream ends with the API's error event and is recorded `partial`). uvicorn's
shutdown closes the listeners and connections and cancels what still runs (the edge answers it
503), and the lifespan flushes compactions and closes the store. A second signal stops at once.
"""

from __future__ import annotations

import logging
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType

import uvicorn

from ..config import Config
from . import heap
from .gate import Edge, Gate
from .request_head import protocol_class, resolved_kind

log = logging.getLogger("ctxproxy")
WORKER_PROTOCOLS = {"h11": "proxy.serving.workers:WorkerH11", "httptools": "proxy.serving.workers:WorkerHttpTools"}


class DrainingServer(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, gate: Gate, grace: float, announce: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(config)
        self.gate = gate
        self.grace = grace
        self.announce = announce
        """called with the URL the server listens on, once it does (the start-up banner)"""
        self.drain_started: float | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.announce is not None and self.servers and self.servers[0].sockets:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            self.announce(f"http://{f'[{host}]' if ':' in host else host}:{port}")

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain_started is not None or self.grace == 0:
            super().handle_exit(sig, frame)  # the second signal: stop now
            return
        self._captured_signals.append(sig)
        self.drain_started = time.monotonic()
        self.gate.drain()
        log.info("%s: draining, %d model calls in flight", signal.Signals(sig).name, self.gate.in_flight)

    async def on_tick(self, counter: int) -> bool:
        if self.drain_started is not None and not self.should_exit:
            waited = time.monotonic() - self.drain_started
            if waited >= self.grace and not self.gate.cutting and self.gate.in_flight:
                log.warning("shutdown grace of %gs over: cutting %d model calls", self.grace, self.gate.in_flight)
                self.gate.cut()
            if self.gate.in_flight == 0 or waited >= self.grace + 1:
                self.should_exit = True
        return await super().on_tick(counter)


def run(
    config: Config,
    app: object,
    host: str,
    port: int,
    log_level: str,
    access_log: bool,
    announce: Callable[[str], None] | None = None,
) -> None:
    heap.tune()
    gate = Gate()
    server_config = uvicorn.Config(
        Edge(app, config.server, gate),  # type: ignore[arg-type]
        host=host,
        port=port,
        http=protocol_class(config.server.http, config.limits),
        log_level=log_level,
        access_log=access_log,
        lifespan="on",
        # Once the drain is over only cut-off work remains: give it a moment, not another grace.
        timeout_graceful_shutdown=2,
    )
    DrainingServer(server_config, gate, config.server.shutdown_grace, announce).run()


def run_workers(
    config: Config, factory: str, workers: int, host: str, port: int, log_level: str, access_log: bool
) -> None:
    """`--workers N`: uvicorn's supervisor and N worker processes on one socket. Each worker
    runs the app behind its own edge (head limits, concurrency cap per worker); on SIGTERM the
    workers stop taking connections and get `server.shutdown_grace` to finish (uvicorn's own
    graceful shutdown: readiness does not fail beforehand as it does with one process)."""
    uvicorn.run(
        factory,
        factory=True,
        workers=workers,
        timeout_worker_healthcheck=30,  # a worker busy starting (litellm's import) is not hung
        host=host,
        port=port,
        # by name: each spawned worker imports it (a class built at run time cannot be pickled)
        http=WORKER_PROTOCOLS[resolved_kind(config.server.http)],
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=int(config.server.shutdown_grace) or None,
    )

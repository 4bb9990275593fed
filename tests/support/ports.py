"""A free TCP port on 127.0.0.1 for a server a test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on right now (the probe socket is closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

"""Store URLs: the one table of the schemes a `store:` URL may use.

`make_store` picks the backend from it, the Redis backend reads from it which schemes name a
cluster and which use TLS, and the config's validation accepts exactly its rows
(tests/store/test_urls.py). A new scheme is a row here and the backend's `from_url` reading it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple


class Scheme(NamedTuple):
    prefix: str
    """What a URL of this scheme starts with."""
    backend: Literal["sqlite", "redis", "postgres"]
    """The package under proxy/store/ that serves it."""
    cluster: bool = False
    tls: bool = False


SCHEMES: tuple[Scheme, ...] = (
    Scheme("sqlite:///", "sqlite"),
    Scheme("redis://", "redis"),
    Scheme("rediss://", "redis", tls=True),
    Scheme("redis+cluster://", "redis", cluster=True),
    Scheme("rediss+cluster://", "redis", cluster=True, tls=True),
    Scheme("postgresql://", "postgres"),
    Scheme("postgres://", "postgres"),
)

FORMS = (
    "sqlite:///PATH, redis://HOST:PORT/DB, redis+cluster://HOST:PORT[,HOST:PORT...] "
    "or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
)
"""The URL forms, for messages that refuse a URL."""


def scheme_of(url: str) -> Scheme | None:
    """The row `url` starts with, or None when its scheme is not a store's."""
    for scheme in SCHEMES:
        if url.startswith(scheme.prefix):
            return scheme
    return None

"""One table of store URL schemes (proxy/store/urls.py): the factory, the config's validation and
the Redis backend read it, so they accept, route and flag exactly its rows."""

from __future__ import annotations

import pytest

from proxy.config_file import parse_config
from proxy.errors import ConfigError, StoreError
from proxy.store import make_store
from proxy.store.redis import RedisStore
from proxy.store.urls import FORMS, SCHEMES, Scheme, scheme_of

ROUTE = {"name": "r", "match": {"model": "*"}, "upstream": {"base_url": "https://api.example.test/v1"}}


def _url(scheme: Scheme) -> str:
    return (
        scheme.prefix
        + {"sqlite": "ctx.db", "redis": "localhost:6379/0", "postgres": "u:p@localhost:5432/db"}[scheme.backend]
    )


@pytest.mark.parametrize("scheme", SCHEMES, ids=[s.prefix for s in SCHEMES])
def test_every_scheme_is_a_valid_config_and_makes_its_backend(scheme: Scheme) -> None:
    url = _url(scheme)
    assert parse_config({"store": url, "routes": [ROUTE]}, "cfg.yaml", {}).store == url
    store = make_store(url)
    assert type(store).__module__.startswith(f"proxy.store.{scheme.backend}")
    if isinstance(store, RedisStore):
        assert store.cluster is scheme.cluster


@pytest.mark.parametrize("url", ["postgresql+asyncpg://db", "sqlite://relative.db", "REDIS://localhost", "redis:/x"])
def test_a_url_of_no_scheme_is_refused_by_both(url: str) -> None:
    assert scheme_of(url) is None
    with pytest.raises(StoreError, match="unsupported store URL scheme") as made:
        make_store(url)
    assert FORMS in str(made.value)
    with pytest.raises(ConfigError) as parsed:
        parse_config({"store": url, "routes": [ROUTE]}, "cfg.yaml", {})
    assert parsed.value.problems == [f"cfg.yaml: store: must be {FORMS}"]


def test_a_scheme_is_matched_by_its_whole_prefix() -> None:
    assert [scheme_of(_url(s)) for s in SCHEMES] == list(SCHEMES)
    assert scheme_of("rediss+cluster://h:1") == Scheme("rediss+cluster://", "redis", cluster=True, tls=True)

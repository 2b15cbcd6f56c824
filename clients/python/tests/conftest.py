"""Fixtures for the client's tests: real memsvc servers (gunicorn) and helpers around them."""

from __future__ import annotations

import importlib.util
import os
import typing as t
import uuid

import pytest
from client_support import DroppingProxy
from client_support import Recorder
from memsvc_client import Memsvc
from memsvc_server import Server
from memsvc_server import start_server

# tests/llamaindex run in the LlamaIndex virtualenv (test_llamaindex.py runs them there).
collect_ignore = [] if importlib.util.find_spec("llama_index") else ["llamaindex"]


@pytest.fixture(autouse=True)
def _no_memsvc_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's MEMSVC_* settings (an API key, say) must not leak into tests."""
    for name in list(os.environ):
        if name.startswith("MEMSVC_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[Server]:
    """One server for most tests: the repo's config and the bundled model.

    The rate limit is off (the tests make far more than 100 calls a minute);
    the concurrency limit stays at its default of 10.
    """
    s = start_server(tmp_path_factory.mktemp("clients"), MEMSVC_RATE_LIMIT_PER_MINUTE="0")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def api_key(server: Server) -> str:
    return server.create_key("acme", "client-tests")


@pytest.fixture
def user() -> str:
    """An end user of its own for each test, so tests do not see each other's memories."""
    return f"user-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def memsvc(server: Server, api_key: str) -> t.Iterator[Memsvc]:
    with Memsvc(server.url, api_key=api_key) as client:
        yield client


@pytest.fixture
def recorder() -> t.Iterator[Recorder]:
    r = Recorder()
    yield r
    for client in r.opened:
        client.close()


@pytest.fixture
def dropping_proxy(server: Server) -> t.Iterator[t.Callable[[int], DroppingProxy]]:
    proxies: list[DroppingProxy] = []

    def make(drop: int) -> DroppingProxy:
        proxies.append(DroppingProxy(server.url, drop))
        return proxies[-1]

    yield make
    for proxy in proxies:
        proxy.close()

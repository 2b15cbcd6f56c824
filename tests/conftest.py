from __future__ import annotations

import dataclasses
import os
import typing as t

import pytest
from click.testing import CliRunner
from click.testing import Result

from memsvc import create_app
from memsvc.api.context import store as request_store
from memsvc.cli import Context
from memsvc.cli import cli
from memsvc.services import keys
from memsvc.store import SqliteStore
from memsvc.store import connect
from tests.support import postgres
from tests.support.helpers import HashEmbedder
from tests.support.servers import MODEL_CACHE


@pytest.fixture(autouse=True)
def _no_memsvc_environment(monkeypatch):
    """Settings in the developer's environment must not leak into tests."""
    for name in list(os.environ):
        if name.startswith("MEMSVC_"):
            monkeypatch.delenv(name)
    # Except one: every app converts the bundled model in the same place.
    monkeypatch.setenv("MEMSVC_MODEL_CACHE_DIR", MODEL_CACHE)


@pytest.fixture(scope="session")
def local_embedder():
    """The bundled model, loaded once for the whole run."""
    from memsvc.embeddings.local import LocalEmbedder

    return LocalEmbedder(cache_dir=MODEL_CACHE)


@pytest.fixture(scope="session")
def multilingual_embedder():
    """The bundled multilingual model (MEMSVC_LOCAL_MODEL=multilingual), loaded once."""
    from memsvc.embeddings.multilingual import MultilingualEmbedder

    return MultilingualEmbedder(cache_dir=MODEL_CACHE)


STORES = ("sqlite", "postgres")


def pytest_addoption(parser):
    parser.addoption(
        "--stores",
        default=",".join(STORES),
        help="run the tests about stores on these only (make test-fast: sqlite)",
    )


def pytest_collection_modifyitems(config, items):
    """``--stores sqlite``: deselect the tests of the other stores (listed as deselected)."""
    chosen = set(config.getoption("--stores").split(","))
    if chosen >= set(STORES):
        return
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("store_kind") if callspec else None
        mark = item.get_closest_marker("stores")
        if kind is not None:
            wanted = kind in chosen
        else:
            wanted = mark is None or bool(chosen & set(mark.args))
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_generate_tests(metafunc):
    """Tests on a ``database`` run once per store, SQLite and PostgreSQL.

    Except tests about one store: ``@pytest.mark.stores("sqlite")`` (the
    closest mark wins), and tests asking for ``db_path``, the SQLite file.
    """
    if "store_kind" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("stores")
    kinds = list(mark.args) if mark else list(STORES)
    if "db_path" in metafunc.fixturenames:
        kinds = ["sqlite"]
    metafunc.parametrize("store_kind", kinds)


@pytest.fixture
def db_path(tmp_path):
    """The SQLite database file of this test (asking for it makes the test SQLite-only)."""
    return str(tmp_path / "memsvc.sqlite3")


@pytest.fixture
def database(store_kind, tmp_path, request):
    """MEMSVC_DATABASE of this test: a SQLite file, or a fresh PostgreSQL database.

    PostgreSQL comes from the pgserver package; if it cannot start, the test
    fails saying why (it is never skipped).
    """
    if store_kind == "sqlite":
        yield str(tmp_path / "memsvc.sqlite3")
        return
    url = postgres.fresh_database(request.node.name)
    yield url
    postgres.drop_database(url)


@pytest.fixture
def make_app(tmp_path, database, local_embedder, request):
    apps = []

    def make(**settings):
        app = create_app(
            {
                "TESTING": True,
                "DATABASE": database,
                "LIMITS_DIR": str(tmp_path / "limits"),
                "MODEL_CACHE_DIR": MODEL_CACHE,
                **settings,
            },
            instance_path=str(tmp_path / "instance"),
        )
        if settings.get("EMBEDDER", "local") == "local":
            # The session's copy of the model: loaded once for every test.
            multilingual = settings.get("LOCAL_MODEL") == "multilingual"
            app.extensions["memsvc"].embedder = (
                request.getfixturevalue("multilingual_embedder") if multilingual else local_embedder
            )
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.extensions["memsvc"].close()


@pytest.fixture
def configured(make_app):
    """A client of an app made with these settings, and headers holding a new API key."""

    def make(**settings):
        app = make_app(**settings)
        with app.app_context():
            secret = keys.create(request_store(), "tenant-A", "test", "memsvc").secret
        return app.test_client(), {"x-api-key": secret}

    return make


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def cli_context(tmp_path, database, local_embedder):
    """What the ``memsvc`` command reads: the test app's database and instance folder."""
    return Context(
        instance_path=str(tmp_path / "instance"),
        overrides={
            "DATABASE": database,
            "LIMITS_DIR": str(tmp_path / "limits"),
            "MODEL_CACHE_DIR": MODEL_CACHE,
        },
        embedder=local_embedder,
    )


@pytest.fixture
def memsvc_cli(cli_context):
    """Run ``memsvc ARGS...`` on the test app's database; returns click's result."""

    def invoke(*args: str) -> Result:
        context = dataclasses.replace(cli_context)
        return CliRunner().invoke(cli, list(args), obj=context)

    return invoke


@pytest.fixture
def new_key(app):
    """Create an API key in the app's database; returns its secret."""

    def make(tenant: str = "tenant-A", name: str = "test") -> str:
        with app.app_context():
            return keys.create(request_store(), tenant, name, "memsvc").secret

    return make


@pytest.fixture
def key(new_key):
    return new_key()


@pytest.fixture
def auth(key):
    return {"x-api-key": key}


@pytest.fixture
def hash_embedder():
    return HashEmbedder(16)


@pytest.fixture
def blank_store(database, store_kind):
    """A Store on a fresh database (file or PostgreSQL), before any schema."""
    if store_kind == "sqlite":
        conn = connect(database)
        s: t.Any = SqliteStore(conn)
    else:
        from memsvc.store.postgres import PgStore
        from memsvc.store.postgres.connection import PgDatabase

        conn = PgDatabase(database, max_size=1).connect()
        s = PgStore(conn)
    yield s
    conn.close()


@pytest.fixture
def store(blank_store, hash_embedder):
    """A Store on a fresh database (file or PostgreSQL) made for the 16-d hash embedder."""
    blank_store.migrate(hash_embedder.model_id, hash_embedder.dimensions)
    return blank_store

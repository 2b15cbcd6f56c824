from __future__ import annotations

import dataclasses
import os

import pytest
from click.testing import CliRunner
from click.testing import Result

from memsvc import create_app
from memsvc.api.context import store as request_store
from memsvc.cli import Context
from memsvc.cli import cli
from memsvc.services import keys
from memsvc.store import Store
from memsvc.store import connect
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


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "memsvc.sqlite3")


@pytest.fixture
def make_app(tmp_path, db_path, local_embedder):
    apps = []

    def make(**settings):
        app = create_app(
            {
                "TESTING": True,
                "DATABASE": db_path,
                "LIMITS_DIR": str(tmp_path / "limits"),
                "MODEL_CACHE_DIR": MODEL_CACHE,
                **settings,
            },
            instance_path=str(tmp_path / "instance"),
        )
        if settings.get("EMBEDDER", "local") == "local":
            app.extensions["memsvc"].embedder = local_embedder
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
def cli_context(tmp_path, db_path, local_embedder):
    """What the ``memsvc`` command reads: the test app's database and instance folder."""
    return Context(
        instance_path=str(tmp_path / "instance"),
        overrides={
            "DATABASE": db_path,
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
def store(db_path, hash_embedder):
    """A Store on a fresh database file made for the 16-d hash embedder."""
    conn = connect(db_path)
    s = Store(conn)
    s.migrate(hash_embedder.model_id, hash_embedder.dimensions)
    yield s
    conn.close()

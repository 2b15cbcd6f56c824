"""Hostile and failing conditions through the API: answer budgets, key farming, planted
limiter folders, storage that takes no writes, control characters."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from memsvc import limits
from memsvc.api.context import runtime
from memsvc.api.context import store
from memsvc.errors import ConfigError
from memsvc.services import keys
from memsvc.tokens import LocalVerifier
from tests.support.helpers import assert_error
from tests.support.helpers import assert_error_item
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query
from tests.support.stores import sql

SECRET = "s" * 40


# -- answers have a budget ----------------------------------------------------------------


def test_a_batch_whose_answers_would_pass_the_budget_gets_413_for_the_rest(configured):
    client, auth = configured(MAX_RESPONSE_BYTES=200_000, RATE_LIMIT_PER_MINUTE=0)
    for i in range(8):
        body = {"userId": "u", "content": f"{i} " + "x" * 30_000}
        data(mutate(client, "memory.add", body, headers=auth))
    paths = ",".join(["memory.getAll"] * 5)
    inputs = {str(i): {"userId": "u", "limit": 2} for i in range(5)}  # ~60 KB each
    resp = client.get(
        f"/trpc/{paths}", query_string={"batch": "1", "input": json.dumps(inputs)}, headers=auth
    )
    assert resp.status_code == 207
    items = resp.get_json()
    assert [("result" in item) for item in items] == [True, True, True, False, False]
    for item in items[3:]:
        assert_error_item(item, 413, "PAYLOAD_TOO_LARGE", "memory.getAll")
        assert "MEMSVC_MAX_RESPONSE_BYTES" in item["error"]["message"]
    assert len(resp.data) < 200_000 + 2_000


def test_one_call_too_large_for_the_budget_is_refused_before_it_is_built(configured):
    client, auth = configured(MAX_RESPONSE_BYTES=100_000)
    for _ in range(5):
        data(mutate(client, "memory.add", {"userId": "u", "content": "y" * 30_000}, headers=auth))
    resp = query(client, "memory.getAll", {"userId": "u"}, headers=auth)
    error = assert_error(resp, 413, "PAYLOAD_TOO_LARGE", "memory.getAll")
    assert "page with cursor" in error["message"]
    assert len(data(query(client, "memory.getAll", {"userId": "u", "limit": 2}, headers=auth))) == 2


# -- keys cannot be farmed -----------------------------------------------------------------


def bearer(tenant="acme"):
    return {"Authorization": f"Bearer {LocalVerifier(SECRET).mint(tenant)}"}


def test_active_keys_per_tenant_are_capped(make_app):
    client = make_app(JWT_SECRET=SECRET, MAX_KEYS_PER_TENANT=3).test_client()
    made = [
        data(mutate(client, "keys.create", {"name": f"k{i}"}, headers=bearer())) for i in range(3)
    ]
    resp = mutate(client, "keys.create", {"name": "one more"}, headers=bearer())
    error = assert_error(resp, 403, "FORBIDDEN", "keys.create")
    assert "already has 3 active API keys" in error["message"]
    # Another tenant is not affected; revoking one makes room.
    data(mutate(client, "keys.create", {"name": "k"}, headers=bearer("globex")))
    data(mutate(client, "keys.revoke", {"id": made[0]["id"]}, headers=bearer()))
    data(mutate(client, "keys.create", {"name": "one more"}, headers=bearer()))


def test_the_keys_router_is_rate_limited_per_tenant(make_app):
    client = make_app(JWT_SECRET=SECRET, KEYS_RATE_LIMIT_PER_MINUTE=4).test_client()
    statuses = [query(client, "keys.list", headers=bearer()).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 200, 429]
    resp = query(client, "keys.list", headers=bearer())
    error = assert_error(resp, 429, "TOO_MANY_REQUESTS", "keys.list")
    assert "key operations per minute per tenant" in error["message"]
    assert int(resp.headers["Retry-After"]) > 0
    assert query(client, "keys.list", headers=bearer("globex")).status_code == 200


def test_a_key_name_with_control_characters_is_refused(make_app):
    client = make_app(JWT_SECRET=SECRET).test_client()
    for name in ("evil\r\nFORGED ROW", "title\x1b]0;owned\x07", "bidi\u202etxt"):
        resp = mutate(client, "keys.create", {"name": name}, headers=bearer())
        error = assert_error(resp, 400, "BAD_REQUEST", "keys.create")
        assert "name: must not contain control characters" in error["message"]


def test_keys_list_escapes_control_characters_of_older_records(app, memsvc_cli):
    with app.app_context():
        created = keys.create(store(), "acme", "plain", "memsvc")
        with store().write():
            store().conn.execute(
                sql(store(), "UPDATE api_keys SET name = ? WHERE id = ?"),
                ("x\x1b]0;owned\x07\ry", created.key.id),
            )
    listing = memsvc_cli("keys", "list").stdout
    assert "\x1b" not in listing and "\r" not in listing and "\x07" not in listing
    assert "x\\x1b]0;owned\\x07\\ry" in listing


# -- the limiter's folder ------------------------------------------------------------------


@pytest.mark.stores("sqlite")  # with PostgreSQL the limits are in the database
def test_a_planted_limits_folder_stops_start_up(make_app, tmp_path):
    open_to_all = tmp_path / "shared"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o777)
    with pytest.raises(ConfigError, match="can be used by other users"):
        make_app(LIMITS_DIR=str(open_to_all))
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="not a folder"):
        make_app(LIMITS_DIR=str(link))


def test_a_folder_of_another_user_is_refused(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    with pytest.raises(PermissionError, match="belongs to another user"):
        limits.private_directory(str(folder), uid=os.getuid() + 1)
    assert limits.private_directory(str(folder)) == str(folder)


def test_a_planted_file_in_the_folder_is_not_followed(tmp_path):
    folder = tmp_path / "limits"
    limiter = limits.Limiter(str(folder))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (folder / "some-key").symlink_to(victim)
    with pytest.raises(OSError):
        limiter.acquire("some-key", limits.Limits(5, 5))
    assert victim.read_text() == "precious"


def test_one_database_reached_by_two_paths_shares_one_set_of_limits(make_app, tmp_path, db_path):
    first = make_app(RATE_LIMIT_PER_MINUTE=3, LIMITS_DIR=None)
    link = tmp_path / "alias.sqlite3"
    link.symlink_to(db_path)
    second = make_app(RATE_LIMIT_PER_MINUTE=3, LIMITS_DIR=None, DATABASE=str(link))
    with first.app_context():
        secret = keys.create(store(), "acme", "k", "memsvc").secret
        folder = runtime().limiter.directory
    with second.app_context():
        assert runtime().limiter.directory == folder
    auth = {"x-api-key": secret}
    a, b = first.test_client(), second.test_client()
    statuses = [
        query(c, "memory.getAll", {"userId": "u"}, headers=auth).status_code for c in (a, b, a, b)
    ]
    assert statuses == [200, 200, 200, 429]
    shutil.rmtree(folder)  # the default folder is under /dev/shm, not tmp_path


# -- storage that takes no writes ------------------------------------------------------------


def read_only_from_now_on(app, monkeypatch):
    """Every new connection refuses writes, as one to a read-only database file does.

    (File permissions would not do: tests may run as root, who may write anyway.)
    """
    from memsvc.store.sqlite import connection as db

    connect = db.connect

    def read_only(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.execute("PRAGMA query_only = 1")
        return conn

    monkeypatch.setattr(db, "connect", read_only)
    app.extensions["memsvc"].backend.disconnect()


@pytest.mark.stores("sqlite")
def test_a_read_only_database_answers_reads_and_503s_writes_saying_why(configured, monkeypatch):
    client, auth = configured()
    read_only_from_now_on(client.application, monkeypatch)
    listed = query(client, "memory.getAll", {"userId": "u"}, headers=auth)
    assert data(listed) == []  # lastUsedAt could not be written: reads go on
    resp = mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth)
    error = assert_error(resp, 503, "SERVICE_UNAVAILABLE", "memory.add")
    assert error["message"] == "Storage unavailable: the database is read-only; try again later"
    health = client.get("/health")
    assert health.status_code == 503
    assert health.get_json()["detail"] == "the database is read-only"


@pytest.mark.stores("postgres")
def test_a_read_only_postgresql_answers_reads_and_503s_writes_then_recovers(configured, database):
    import psycopg

    client, auth = configured()
    kept = data(mutate(client, "memory.add", {"userId": "u", "content": "kept"}, headers=auth))

    def read_only(on: bool) -> None:
        # As a hot standby or an operator's ALTER does: new sessions refuse writes.
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            name = conn.execute("SELECT current_database()").fetchone()[0]
            value = "on" if on else "off"
            conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {value}')
        client.application.extensions["memsvc"].backend.disconnect()  # sessions from now on

    read_only(True)
    listed = query(client, "memory.getAll", {"userId": "u"}, headers=auth)
    assert [m["id"] for m in data(listed)] == [kept["id"]]
    resp = mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth)
    error = assert_error(resp, 503, "SERVICE_UNAVAILABLE", "memory.add")
    assert error["message"] == "Storage unavailable: the database is read-only; try again later"
    health = client.get("/health")
    assert health.status_code == 503
    assert health.get_json()["detail"] == "the database is read-only"
    read_only(False)
    again = data(mutate(client, "memory.add", {"userId": "u", "content": "again"}, headers=auth))
    listed = data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    assert {m["id"] for m in listed} == {kept["id"], again["id"]}


@pytest.mark.stores("sqlite")
def test_a_full_database_503s_writes_and_health_then_recovers_with_nothing_lost(configured):
    client, auth = configured(RATE_LIMIT_PER_MINUTE=0)
    kept = data(mutate(client, "memory.add", {"userId": "u", "content": "kept"}, headers=auth))
    conn = client.application.extensions["memsvc"].backend.db.connection()
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages}")  # this connection: the disk is full
    failed = 0
    for _ in range(40):
        resp = mutate(client, "memory.add", {"userId": "u", "content": "z" * 20_000}, headers=auth)
        if resp.status_code != 200:
            error = assert_error(resp, 503, "SERVICE_UNAVAILABLE", "memory.add")
            assert "the disk (or the database's size limit) is full" in error["message"]
            failed += 1
            break
    assert failed == 1
    assert client.get("/health").status_code == 503
    assert data(query(client, "memory.getById", {"id": kept["id"]}, headers=auth)) == kept
    conn.execute("PRAGMA max_page_count = 1073741823")  # space again
    again = data(mutate(client, "memory.add", {"userId": "u", "content": "again"}, headers=auth))
    assert client.get("/health").status_code == 200
    listed = [m["id"] for m in data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))]
    assert again["id"] in listed and kept["id"] in listed

import os
import time

from tests.support.helpers import assert_error


def test_health_is_ok_without_credentials(client):
    resp = client.get("/health")
    assert resp.status_code == 200
    body = resp.get_json()
    assert list(body) == ["status", "db", "timestamp"]
    assert body["status"] == "ok" and body["db"] == "connected"
    assert abs(body["timestamp"] - time.time() * 1000) < 60_000


def test_health_is_503_when_the_database_is_gone(client, db_path):
    assert client.get("/health").status_code == 200
    os.remove(db_path)
    resp = client.get("/health")
    assert resp.status_code == 503
    body = resp.get_json()
    assert body["status"] == "error" and body["db"] == "disconnected"
    assert isinstance(body["timestamp"], int)


def test_health_only_answers_get(client):
    assert_error(client.delete("/health"), 405, "METHOD_NOT_SUPPORTED", None)

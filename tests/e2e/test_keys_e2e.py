"""API key revocation across gunicorn workers."""

import pytest
import requests

from tests.support.servers import start_server

pytestmark = pytest.mark.e2e


def test_a_revoked_key_fails_on_every_worker_at_once(tmp_path):
    server = start_server(tmp_path, WEB_CONCURRENCY="4")
    try:
        bearer = {"Authorization": f"Bearer {server.token('tenant-R')}"}
        created = requests.post(
            f"{server.trpc}/keys.create", json={"name": "doomed"}, headers=bearer, timeout=30
        ).json()["result"]["data"]
        key = {"x-api-key": created["secret"]}
        url = f"{server.trpc}/memory.getAll?input=%7B%22userId%22%3A%22u%22%7D"
        # Fresh connections spread over the four workers; each has served the key.
        assert [requests.get(url, headers=key, timeout=30).status_code for _ in range(40)] == [
            200
        ] * 40
        revoked = requests.post(
            f"{server.trpc}/keys.revoke", json={"id": created["id"]}, headers=bearer, timeout=30
        )
        assert revoked.json() == {"result": {"data": {"success": True}}}
        statuses = [requests.get(url, headers=key, timeout=30).status_code for _ in range(40)]
        assert statuses == [401] * 40
    finally:
        server.stop()

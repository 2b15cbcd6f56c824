"""The unmodified npm @trpc/client 11 against memsvc under gunicorn."""

import json
import os
import shutil
import subprocess

import pytest

from tests.support.servers import REPO

pytestmark = pytest.mark.e2e

CLIENT = REPO / "tests" / "e2e" / "client"


@pytest.fixture(scope="module")
def seen(server):
    node = shutil.which("node")
    if node is None or not (CLIENT / "node_modules" / "@trpc" / "client").is_dir():
        pytest.fail("needs node and the client's packages: run `make test`, which installs them")
    result = subprocess.run(
        [node, "client.mjs"],
        cwd=CLIENT,
        env={
            **os.environ,
            "MEMSVC_URL": server.trpc,
            "MEMSVC_API_KEY": server.create_key(),
            "MEMSVC_TOKEN": server.token("tenant-A"),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + server.output()[-3000:]
    return json.loads(result.stdout)


LINKS = ["httpLink", "httpBatchLink"]


@pytest.mark.parametrize("link", LINKS)
def test_successful_calls_return_the_data(seen, link):
    out = seen[link]
    added = out["add"]
    assert added["content"] == f"I like green tea ({link})"
    assert added["metadata"] == {"via": link}
    assert [m["id"] for m in out["getAll"]] == [out["second"]["id"], added["id"]]
    assert out["search"][0]["id"] == added["id"]
    assert out["search"][0]["similarity"] == pytest.approx(1, abs=1e-6)
    by_id, second, newest = out["together"]
    assert by_id == added and second == out["second"] and newest == [out["second"]]
    assert out["delete"] == {"success": True}
    assert [m["id"] for m in out["afterDelete"]] == [added["id"]]


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize(
    "case, code, status, path",
    [
        ("notFound", "NOT_FOUND", 404, "memory.getById"),
        ("badRequest", "BAD_REQUEST", 400, "memory.add"),
        ("badLimit", "BAD_REQUEST", 400, "memory.search"),
        ("unauthorized", "UNAUTHORIZED", 401, "memory.getAll"),
        ("deleteAgain", "NOT_FOUND", 404, "memory.delete"),
    ],
)
def test_errors_reach_the_client_through_the_shim(seen, link, case, code, status, path):
    error = seen[link][case]
    assert error["ok"] is False
    assert (error["code"], error["httpStatus"], error["path"]) == (code, status, path)
    assert error["message"] and "Unable to transform" not in error["message"]


@pytest.mark.parametrize("link", LINKS)
def test_one_failure_in_a_batch_does_not_fail_the_others(seen, link):
    ok, missing = seen[link]["mixed"]
    assert ok == {"ok": True, "id": seen[link]["add"]["id"]}
    assert missing["code"] == "NOT_FOUND"


@pytest.mark.parametrize("link", LINKS)
def test_without_the_shim_errors_are_opaque_but_successes_work(seen, link):
    # Why memsvcFetch exists: @trpc/client cannot read string error codes (docs/api.md).
    assert seen[link]["withoutShim"]["message"] == "Unable to transform response from server"
    assert seen[link]["withoutShim"]["code"] is None
    assert len(seen[link]["successWithoutShim"]) == 1


@pytest.mark.parametrize("link", LINKS)
def test_key_lifecycle_through_the_client(seen, link):
    out = seen["keys"][link]
    created = out["created"]
    assert created["secret"].startswith("sk_memsvc_") and created["idpUserId"] == "tenant-A"
    assert out["added"]["idpUserId"] == "tenant-A"
    mine = next(k for k in out["listed"] if k["id"] == created["id"])
    assert mine["lastUsedAt"] is not None and mine["revokedAt"] is None
    assert "secret" not in mine
    assert out["revoked"] == {"success": True} and out["revokedAgain"] == {"success": True}
    assert (out["afterRevoke"]["code"], out["afterRevoke"]["httpStatus"]) == ("UNAUTHORIZED", 401)
    after = next(k for k in out["listedAfter"] if k["id"] == created["id"])
    assert after["revokedAt"] is not None
    assert out["noToken"]["code"] == "UNAUTHORIZED" and out["noToken"]["path"] == "keys.list"
    assert out["missing"]["code"] == "NOT_FOUND"

"""The keys router through HTTP, in local token mode."""

import re
import time

import pytest

from memsvc.tokens import LocalVerifier
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

SECRET = "k" * 40
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
KEY_FIELDS = [
    "id", "idpUserId", "idpKeyId", "name", "lastUsedAt", "createdAt", "revokedAt", "rateLimit",
    "concurrencyLimit",
]  # fmt: skip
CREATED_FIELDS = ["id", "idpUserId", "idpKeyId", "name", "secret", "createdAt"]
MISSING_ID = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def app(make_app):
    return make_app(JWT_SECRET=SECRET)


def bearer(tenant="tenant-A", **kwargs):
    return {"Authorization": f"Bearer {LocalVerifier(SECRET).mint(tenant, **kwargs)}"}


def create(client, name="laptop", tenant="tenant-A"):
    return data(mutate(client, "keys.create", {"name": name}, headers=bearer(tenant)))


def listed(client, tenant="tenant-A"):
    return data(query(client, "keys.list", headers=bearer(tenant)))


def test_create_returns_the_secret_once(client):
    created = create(client)
    assert list(created) == CREATED_FIELDS
    assert created["idpUserId"] == "tenant-A" and created["name"] == "laptop"
    assert re.fullmatch(r"sk_memsvc_[0-9a-f]{64}", created["secret"])
    assert re.fullmatch(r"key_[0-9a-f]{16}", created["idpKeyId"])
    assert ISO.match(created["createdAt"])
    assert created["secret"] not in str(listed(client))


def test_a_created_key_works_for_memory_calls(client):
    secret = create(client)["secret"]
    added = data(
        mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers={"x-api-key": secret})
    )
    assert added["idpUserId"] == "tenant-A"


def test_list_shows_every_key_of_the_tenant_only(client):
    a1 = create(client, "one")
    a2 = create(client, "two")
    create(client, "theirs", tenant="tenant-B")
    keys = listed(client)
    assert [k["id"] for k in keys] == [a1["id"], a2["id"]]
    for k in keys:
        assert list(k) == KEY_FIELDS
        assert k["lastUsedAt"] is None and k["revokedAt"] is None
    assert "secret" not in str(keys) and "hash" not in str(keys)
    assert [k["name"] for k in listed(client, "tenant-B")] == ["theirs"]
    assert listed(client, "tenant-C") == []


@pytest.mark.parametrize("raw", ['{"whatever":1}', "5", "[1,2]", '"s"', "null"])
def test_list_takes_no_input_and_ignores_any(client, raw):
    # As a tRPC procedure that declares no input: what a call carries is ignored.
    resp = client.get("/trpc/keys.list", query_string={"input": raw}, headers=bearer())
    assert data(resp) == []


def test_last_used_is_set_by_memory_calls(client):
    created = create(client)
    auth = {"x-api-key": created["secret"]}
    data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    [key] = listed(client)
    assert ISO.match(key["lastUsedAt"])
    assert key["lastUsedAt"] >= created["createdAt"]


def test_last_used_is_written_at_most_once_per_resolution(make_app):
    app = make_app(JWT_SECRET=SECRET, LAST_USED_RESOLUTION_SECONDS=3600)
    client = app.test_client()
    auth = {"x-api-key": create(client)["secret"]}
    data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    first = listed(client)[0]["lastUsedAt"]
    time.sleep(0.01)
    data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    assert listed(client)[0]["lastUsedAt"] == first


def test_last_used_follows_every_call_with_resolution_zero(make_app):
    app = make_app(JWT_SECRET=SECRET, LAST_USED_RESOLUTION_SECONDS=0)
    client = app.test_client()
    auth = {"x-api-key": create(client)["secret"]}
    data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    first = listed(client)[0]["lastUsedAt"]
    time.sleep(0.01)
    data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    assert listed(client)[0]["lastUsedAt"] > first


def test_revoke_stops_the_key_at_once(client):
    created = create(client)
    auth = {"x-api-key": created["secret"]}
    data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    assert data(mutate(client, "keys.revoke", {"id": created["id"]}, headers=bearer())) == {
        "success": True
    }
    assert_error(
        query(client, "memory.getAll", {"userId": "u"}, headers=auth),
        401,
        "UNAUTHORIZED",
        "memory.getAll",
    )
    [key] = listed(client)
    assert ISO.match(key["revokedAt"])


def test_revoking_twice_succeeds_and_keeps_the_first_time(client):
    created = create(client)
    mutate(client, "keys.revoke", {"id": created["id"]}, headers=bearer())
    first = listed(client)[0]["revokedAt"]
    time.sleep(0.01)
    again = mutate(client, "keys.revoke", {"id": created["id"]}, headers=bearer())
    assert data(again) == {"success": True}
    assert listed(client)[0]["revokedAt"] == first


def test_revoking_an_unknown_key_is_404(client):
    error = assert_error(
        mutate(client, "keys.revoke", {"id": MISSING_ID}, headers=bearer()),
        404,
        "NOT_FOUND",
        "keys.revoke",
    )
    assert error["message"] == "API key not found"


def test_revoking_another_tenants_key_is_401_and_keeps_it(client):
    theirs = create(client, tenant="tenant-B")
    error = assert_error(
        mutate(client, "keys.revoke", {"id": theirs["id"]}, headers=bearer()),
        401,
        "UNAUTHORIZED",
        "keys.revoke",
    )
    assert error["message"] == "API key belongs to another user"
    assert listed(client, "tenant-B")[0]["revokedAt"] is None


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "name: is required"),
        ({"name": ""}, "name: must not be empty"),
        ({"name": 3}, "name: must be a string"),
        ({"name": "n" * 257}, "name: must be at most 256 characters"),
    ],
)
def test_create_rejects_bad_names(client, body, message):
    error = assert_error(
        mutate(client, "keys.create", body, headers=bearer()), 400, "BAD_REQUEST", "keys.create"
    )
    assert message in error["message"]
    assert listed(client) == []


@pytest.mark.parametrize("body", [{"id": "x"}, {}, {"id": 5}])
def test_revoke_needs_a_uuid(client, body):
    assert_error(
        mutate(client, "keys.revoke", body, headers=bearer()), 400, "BAD_REQUEST", "keys.revoke"
    )


@pytest.mark.parametrize(
    "send, path, input",
    [
        (query, "keys.list", None),
        (mutate, "keys.create", {"name": "x"}),
        (mutate, "keys.revoke", {"id": MISSING_ID}),
    ],
)
@pytest.mark.parametrize(
    "headers, message",
    [
        ({}, "Missing bearer token"),
        ({"Authorization": "Bearer"}, "Missing bearer token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "Missing bearer token"),
        ({"Authorization": "Bearer not.a.jwt"}, "Malformed"),
        ({"Authorization": f"Bearer {LocalVerifier('w' * 40).mint('tenant-A')}"}, "signature"),
        (
            {"Authorization": f"Bearer {LocalVerifier(SECRET).mint('tenant-A', ttl=-100)}"},
            "expired",
        ),
        ({"x-api-key": "sk_memsvc_" + "0" * 64}, "Missing bearer token"),
    ],
)
def test_every_keys_call_needs_a_valid_token(client, send, path, input, headers, message):
    error = assert_error(send(client, path, input, headers=headers), 401, "UNAUTHORIZED", path)
    assert re.search(message, error["message"])


def test_an_api_key_is_not_a_bearer_token(client):
    secret = create(client)["secret"]
    resp = query(client, "keys.list", headers={"Authorization": f"Bearer {secret}"})
    assert_error(resp, 401, "UNAUTHORIZED", "keys.list")


def test_a_server_with_no_token_configuration_refuses_keys_calls(make_app, tmp_path):
    client = make_app().test_client()  # no secret, no provider, no instance/jwt-secret
    error = assert_error(
        query(client, "keys.list", headers=bearer()), 401, "UNAUTHORIZED", "keys.list"
    )
    assert "not configured" in error["message"]


def test_a_batch_may_span_routers(client):
    secret = create(client)["secret"]
    resp = client.get(
        "/trpc/keys.list,memory.getAll",
        query_string={"batch": "1", "input": '{"1":{"userId":"u"}}'},
        headers={**bearer(), "x-api-key": secret},
    )
    assert resp.status_code == 200
    keys, memories = resp.get_json()
    assert len(keys["result"]["data"]) == 1 and memories == {"result": {"data": []}}


def set_limits(client, body, tenant="tenant-A"):
    return mutate(client, "keys.setLimits", body, headers=bearer(tenant))


def test_a_tenant_lowers_its_keys_limits_and_they_apply_at_once(make_app):
    app = make_app(JWT_SECRET=SECRET, RATE_LIMIT_PER_MINUTE=60, CONCURRENCY_LIMIT=10)
    client = app.test_client()
    created = create(client)
    assert listed(client)[0]["rateLimit"] is None  # the server's setting
    key = data(set_limits(client, {"id": created["id"], "rateLimit": 2}))
    assert list(key) == KEY_FIELDS
    assert (key["rateLimit"], key["concurrencyLimit"]) == (2, None)
    assert listed(client)[0]["rateLimit"] == 2
    auth = {"x-api-key": created["secret"]}
    codes = [
        query(client, "memory.getAll", {"userId": "u"}, headers=auth).status_code for _ in "abc"
    ]
    assert codes == [200, 200, 429]
    # Absent: unchanged; null: back to the server's setting.
    key = data(set_limits(client, {"id": created["id"], "concurrencyLimit": 3}))
    assert (key["rateLimit"], key["concurrencyLimit"]) == (2, 3)
    key = data(set_limits(client, {"id": created["id"], "rateLimit": None}))
    assert (key["rateLimit"], key["concurrencyLimit"]) == (None, 3)
    assert listed(client)[0]["rateLimit"] is None


def test_only_the_operator_raises_a_keys_limits(make_app):
    app = make_app(JWT_SECRET=SECRET, RATE_LIMIT_PER_MINUTE=60, CONCURRENCY_LIMIT=10)
    client = app.test_client()
    created = create(client)
    for body in ({"rateLimit": 61}, {"rateLimit": 0}, {"concurrencyLimit": 11}):
        error = assert_error(
            set_limits(client, {"id": created["id"], **body}), 403, "FORBIDDEN", "keys.setLimits"
        )
        assert "only the operator raises them" in error["message"]
    assert listed(client)[0]["rateLimit"] is None
    # A key the operator gave more may be set anywhere up to that.
    app.extensions["memsvc"].store().set_key_limits(created["id"], 500, None, ceiling=True)
    assert data(set_limits(client, {"id": created["id"], "rateLimit": 400}))["rateLimit"] == 400


def test_setting_another_tenants_key_limits_is_401_and_changes_nothing(client):
    theirs = create(client, tenant="tenant-B")
    error = assert_error(
        set_limits(client, {"id": theirs["id"], "rateLimit": 1}),
        401,
        "UNAUTHORIZED",
        "keys.setLimits",
    )
    assert error["message"] == "API key belongs to another user"
    assert listed(client, "tenant-B")[0]["rateLimit"] is None
    assert_error(
        set_limits(client, {"id": MISSING_ID, "rateLimit": 1}), 404, "NOT_FOUND", "keys.setLimits"
    )


@pytest.mark.parametrize(
    "body, message",
    [
        ({"rateLimit": -1}, "rateLimit: must be between 0 and 100000, or null"),
        ({"rateLimit": "5"}, "rateLimit: must be an integer"),
        ({"concurrencyLimit": 1.5}, "concurrencyLimit: must be an integer"),
        ({"concurrencyLimit": True}, "concurrencyLimit: must be an integer"),
    ],
)
def test_bad_limits_are_400(client, body, message):
    created = create(client)
    error = assert_error(
        set_limits(client, {"id": created["id"], **body}), 400, "BAD_REQUEST", "keys.setLimits"
    )
    assert message in error["message"]


def service_limits(client, secret):
    info = data(query(client, "service.info", headers={"x-api-key": secret}))
    return info["limits"]["perMinute"], info["limits"]["concurrent"]


def test_the_operators_limits_are_a_ceiling_the_tenant_only_lowers(make_app, memsvc_cli):
    app = make_app(JWT_SECRET=SECRET, RATE_LIMIT_PER_MINUTE=100, CONCURRENCY_LIMIT=10)
    client = app.test_client()
    created = create(client)
    throttled = memsvc_cli(
        "keys", "set-limits", created["id"], "--per-minute", "10", "--concurrent", "1"
    )
    assert throttled.exit_code == 0, throttled.output
    assert service_limits(client, created["secret"]) == (10, 1)
    # Above the operator's limits: refused, whatever the server's settings allow.
    for body in ({"rateLimit": 100}, {"rateLimit": 11}, {"rateLimit": 0}, {"concurrencyLimit": 2}):
        error = assert_error(
            set_limits(client, {"id": created["id"], **body}), 403, "FORBIDDEN", "keys.setLimits"
        )
        assert "only the operator raises them" in error["message"]
    # null: back to the operator's limits, not the server's settings.
    key = data(
        set_limits(client, {"id": created["id"], "rateLimit": None, "concurrencyLimit": None})
    )
    assert (key["rateLimit"], key["concurrencyLimit"]) == (10, 1)
    assert service_limits(client, created["secret"]) == (10, 1)
    # Lower is the tenant's to choose, and null takes it back to the ceiling.
    key = data(set_limits(client, {"id": created["id"], "rateLimit": 4}))
    assert (key["rateLimit"], key["concurrencyLimit"]) == (4, 1)
    assert service_limits(client, created["secret"]) == (4, 1)
    key = data(set_limits(client, {"id": created["id"], "rateLimit": None}))
    assert service_limits(client, created["secret"]) == (10, 1)
    # The operator lowering the ceiling below the tenant's choice: the lower one holds.
    data(set_limits(client, {"id": created["id"], "rateLimit": 8}))
    assert memsvc_cli("keys", "set-limits", created["id"], "--per-minute", "5").exit_code == 0
    assert service_limits(client, created["secret"]) == (5, 1)
    assert listed(client)[0]["rateLimit"] == 5
    # The operator's reset: back to the server's settings, the tenant's own choice kept.
    assert memsvc_cli("keys", "set-limits", created["id"], "--reset").exit_code == 0
    assert service_limits(client, created["secret"]) == (8, 10)

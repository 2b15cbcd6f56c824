"""Request limits through HTTP: the 429 envelope, batches, per-key overrides."""

from memsvc.api.context import store
from memsvc.api.middleware import tenant_slot
from memsvc.limits import Limits
from tests.support.helpers import assert_error
from tests.support.helpers import assert_error_item
from tests.support.helpers import data
from tests.support.helpers import query

NOBODY = {"userId": "nobody"}


def get_all(client, key):
    return query(client, "memory.getAll", NOBODY, headers={"x-api-key": key})


def batch(client, key, n):
    inputs = "{" + ",".join(f'"{i}":{{"userId":"u"}}' for i in range(n)) + "}"
    return client.get(
        "/trpc/" + ",".join(["memory.getAll"] * n),
        query_string={"batch": "1", "input": inputs},
        headers={"x-api-key": key},
    )


def test_the_101st_call_in_a_minute_is_429_with_retry_after(client, key):
    for _ in range(100):
        assert get_all(client, key).status_code == 200
    resp = get_all(client, key)
    error = assert_error(resp, 429, "TOO_MANY_REQUESTS", "memory.getAll")
    assert error["message"] == "Rate limit exceeded: 100 requests per minute"
    assert 55 <= int(resp.headers["Retry-After"]) <= 60


def test_every_call_in_a_batch_counts(client, key):
    assert batch(client, key, 98).status_code == 200
    resp = batch(client, key, 3)
    assert resp.status_code == 207
    first, second, third = resp.get_json()
    assert first["result"] == {"data": []} and second["result"] == {"data": []}
    assert_error_item(third, 429, "TOO_MANY_REQUESTS", "memory.getAll")
    assert "Retry-After" in resp.headers


def test_a_limited_key_does_not_limit_others(client, new_key):
    busy, other = new_key("tenant-A", "busy"), new_key("tenant-A", "other")
    for _ in range(100):
        get_all(client, busy)
    assert get_all(client, busy).status_code == 429
    assert get_all(client, other).status_code == 200


def test_unauthenticated_calls_are_not_counted(client, key):
    for _ in range(150):
        assert get_all(client, "sk_memsvc_wrong").status_code == 401
    assert get_all(client, key).status_code == 200


def test_global_limits_are_settings(configured):
    client, auth = configured(RATE_LIMIT_PER_MINUTE=3)
    secret = auth["x-api-key"]
    assert [get_all(client, secret).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_zero_turns_the_limits_off(configured):
    client, auth = configured(RATE_LIMIT_PER_MINUTE=0, CONCURRENCY_LIMIT=0)
    assert all(get_all(client, auth["x-api-key"]).status_code == 200 for _ in range(150))


def test_per_key_limits_from_the_command_line(app, client, memsvc_cli):
    secret = memsvc_cli("keys", "create", "acme", "ci").stdout.strip()
    with app.app_context():
        [key] = store().list_keys("acme")
    result = memsvc_cli("keys", "set-limits", key.id, "--per-minute", "2")
    assert result.exit_code == 0, result.output
    assert "2 per minute, 10 (default) concurrent" in result.stdout
    assert [get_all(client, secret).status_code for _ in range(3)] == [200, 200, 429]
    listing = memsvc_cli("keys", "list").stdout
    assert "PER MINUTE" in listing and "10 (default)" in listing
    raised = memsvc_cli("keys", "set-limits", key.id, "--per-minute", "500")
    assert raised.exit_code == 0
    assert get_all(client, secret).status_code == 200
    reset = memsvc_cli("keys", "set-limits", key.id, "--reset")
    assert "100 (default) per minute" in reset.stdout


def test_set_limits_needs_something_to_set(app, memsvc_cli):
    secret = memsvc_cli("keys", "create", "acme", "ci").stdout.strip()
    assert secret
    with app.app_context():
        [key] = store().list_keys("acme")
    assert memsvc_cli("keys", "set-limits", key.id).exit_code == 2
    missing = memsvc_cli("keys", "set-limits", "nope", "--per-minute", "1")
    assert missing.exit_code == 1 and "not found" in missing.stderr
    too_big = memsvc_cli("keys", "set-limits", key.id, "--per-minute", "100001")
    assert too_big.exit_code == 2


def test_keys_calls_are_not_rate_limited(make_app):
    from memsvc.tokens import LocalVerifier

    secret = "j" * 40
    client = make_app(JWT_SECRET=secret, RATE_LIMIT_PER_MINUTE=1).test_client()
    headers = {"Authorization": f"Bearer {LocalVerifier(secret).mint('t')}"}
    assert all(data(query(client, "keys.list", headers=headers)) == [] for _ in range(5))


def test_a_call_refused_for_its_tenants_calls_at_once_uses_up_none_of_its_keys_minute(
    configured,
):
    client, headers = configured(RATE_LIMIT_PER_MINUTE=3, TENANT_CONCURRENCY_LIMIT=1)
    app = client.application
    limiter = app.extensions["memsvc"].limiter
    # Another call of the tenant holds its one slot.
    held = limiter.acquire(tenant_slot("tenant-A"), Limits(0, 1))
    try:
        for _ in range(5):
            resp = query(client, "memory.getAll", NOBODY, headers=headers)
            error = assert_error(resp, 429, "TOO_MANY_REQUESTS", "memory.getAll")
            assert error["message"].startswith("Too many concurrent requests: at most 1 at once")
    finally:
        limiter.release(tenant_slot("tenant-A"), held)
    # The key's minute is whole: three calls, and the fourth refused for the rate.
    for _ in range(3):
        assert query(client, "memory.getAll", NOBODY, headers=headers).status_code == 200
    resp = query(client, "memory.getAll", NOBODY, headers=headers)
    assert assert_error(resp, 429, "TOO_MANY_REQUESTS", "memory.getAll")["message"] == (
        "Rate limit exceeded: 3 requests per minute"
    )

"""The tRPC wire format, as docs/api.md specifies it."""

import json
import uuid

import pytest

from tests.support.helpers import assert_error
from tests.support.helpers import assert_error_item
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

NOBODY = {"userId": "nobody"}
MISSING_ID = "00000000-0000-4000-8000-000000000000"


def batch_get(client, paths, inputs, **kwargs):
    qs = {"batch": "1"}
    if inputs is not None:
        qs["input"] = json.dumps(inputs)
    return client.get(f"/trpc/{','.join(paths)}", query_string=qs, **kwargs)


def batch_post(client, paths, inputs, **kwargs):
    return client.post(f"/trpc/{','.join(paths)}?batch=1", json=inputs, **kwargs)


def test_success_envelope_is_result_data_and_nothing_else(client, auth):
    resp = query(client, "memory.getAll", NOBODY, headers=auth)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.data == b'{"result":{"data":[]}}'


def test_plus_in_the_query_string_is_a_space(client, auth):
    added = data(mutate(client, "memory.add", {"userId": "a b", "content": "x"}, headers=auth))
    resp = client.get('/trpc/memory.getAll?input={"userId":"a+b"}', headers=auth)
    assert [m["id"] for m in data(resp)] == [added["id"]]


def test_unknown_procedure_is_404_before_authentication(client):
    assert_error(query(client, "memory.nope", {}), 404, "NOT_FOUND", "memory.nope")
    resp = client.post("/trpc/memory.nope", json={})
    error = assert_error(resp, 404, "NOT_FOUND", "memory.nope")
    assert error["message"] == 'No procedure found on path "memory.nope"'


@pytest.mark.parametrize("url", ["/trpc", "/trpc/"])
def test_empty_procedure_path_is_404(client, url):
    assert_error(client.get(url), 404, "NOT_FOUND", "")


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("GET", "memory.add", "POST"),
        ("PUT", "memory.add", "POST"),
        ("DELETE", "memory.delete", "POST"),
        ("PATCH", "memory.add", "POST"),
        ("OPTIONS", "memory.add", "POST"),
        ("OPTIONS", "memory.getAll", "GET"),
        ("POST", "memory.getAll", "GET"),
        ("POST", "memory.search", "GET"),
    ],
)
def test_wrong_method_is_405_with_allow(client, method, path, allow):
    resp = client.open(f"/trpc/{path}", method=method, json={})
    error = assert_error(resp, 405, "METHOD_NOT_SUPPORTED", path)
    assert resp.headers["Allow"] == allow
    assert error["message"].startswith(f"Unsupported {method}-request to ")


def test_options_without_content_type_is_415_like_any_non_get(client):
    # No empty 200 from Flask: tRPC treats OPTIONS as any other body method.
    resp = client.open("/trpc/memory.getAll", method="OPTIONS")
    error = assert_error(resp, 415, "UNSUPPORTED_MEDIA_TYPE", None)
    assert error["message"] == "Missing content-type header"


@pytest.mark.parametrize("url", ["/health", "/"])
def test_options_outside_trpc_is_answered_in_the_envelope(client, url):
    resp = client.open(url, method="OPTIONS")
    assert resp.status_code in (404, 405)
    assert resp.json["error"]["data"]["httpStatus"] == resp.status_code
    if resp.status_code == 405:
        assert set(resp.headers["Allow"].split(", ")) == {"GET", "HEAD"}


def test_wrong_method_is_decided_before_authentication(client):
    resp = client.get("/trpc/memory.add")
    assert_error(resp, 405, "METHOD_NOT_SUPPORTED", "memory.add")


def test_head_is_204_without_body(client):
    resp = client.head("/trpc/memory.getAll")
    assert resp.status_code == 204
    assert resp.data == b""


@pytest.mark.parametrize(
    "headers, message",
    [
        ({}, "Missing content-type header"),
        ({"Content-Type": "text/plain"}, 'Unsupported content-type "text/plain"'),
        ({"Content-Type": "application/x-www-form-urlencoded"}, "Unsupported content-type"),
        ({"Content-Type": "application/jsonp"}, 'Unsupported content-type "application/jsonp"'),
    ],
)
def test_post_without_json_content_type_is_415_without_path(client, auth, headers, message):
    resp = client.post(
        "/trpc/memory.add", data='{"userId":"u","content":"x"}', headers={**auth, **headers}
    )
    error = assert_error(resp, 415, "UNSUPPORTED_MEDIA_TYPE", None)
    assert error["message"].startswith(message)


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "Application/JSON", "application/json ;x=y"]
)
def test_json_content_type_with_parameters_or_capitals_is_accepted(client, auth, content_type):
    resp = client.post(
        "/trpc/memory.add",
        data=json.dumps({"userId": "u", "content": "x"}),
        headers={**auth, "Content-Type": content_type},
    )
    assert data(resp)["content"] == "x"


@pytest.mark.parametrize("raw", ['{"userId":', "{bad", "", "   ", "[1,", '{"a":NaN}', "Infinity"])
def test_malformed_json_body_is_400_with_path(client, auth, raw):
    resp = client.post(
        "/trpc/memory.add", data=raw, headers={**auth, "Content-Type": "application/json"}
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert "JSON" in error["message"]


def test_malformed_json_in_the_query_is_400_with_path(client, auth):
    resp = client.get("/trpc/memory.getAll?input=%7b%22userId%22%3a", headers=auth)
    assert_error(resp, 400, "BAD_REQUEST", "memory.getAll")


def test_malformed_json_without_a_key_is_401_first(client):
    resp = client.get("/trpc/memory.getAll?input=%7bbad")
    assert_error(resp, 401, "UNAUTHORIZED", "memory.getAll")


def test_deeply_nested_json_is_400_not_a_crash(client, auth):
    raw = "[" * 100_000 + "]" * 100_000
    resp = client.post(
        "/trpc/memory.add", data=raw, headers={**auth, "Content-Type": "application/json"}
    )
    assert_error(resp, 400, "BAD_REQUEST", "memory.add")


def test_invalid_utf8_body_is_400(client, auth):
    resp = client.post(
        "/trpc/memory.add",
        data=b'{"userId":"u","content":"\xff\xfe"}',
        headers={**auth, "Content-Type": "application/json"},
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert "UTF-8" in error["message"]


def test_invalid_utf8_in_the_query_is_400(client, auth):
    resp = client.get('/trpc/memory.getAll?input={"userId":"%ff"}', headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.getAll")
    assert "UTF-8" in error["message"]


def test_a_body_over_the_limit_is_413(configured):
    client, auth = configured(MAX_CONTENT_LENGTH=1000)
    resp = mutate(client, "memory.add", {"userId": "u", "content": "x" * 2000}, headers=auth)
    error = assert_error(resp, 413, "PAYLOAD_TOO_LARGE", "memory.add")
    assert "1000 bytes" in error["message"]


@pytest.mark.parametrize(
    "raw, received",
    [("5", "number"), ("[1,2]", "array"), ("null", "null"), ('"s"', "string"), ("true", "boolean")],
)
def test_non_object_input_is_400(client, auth, raw, received):
    resp = client.post(
        "/trpc/memory.add", data=raw, headers={**auth, "Content-Type": "application/json"}
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert error["message"] == f"Invalid input: expected object, received {received}"


def test_missing_input_is_400_undefined(client, auth):
    resp = client.get("/trpc/memory.getAll", headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.getAll")
    assert error["message"] == (
        "Invalid input: expected object, received undefined; send ?input=<URL-encoded JSON object>"
    )


@pytest.mark.parametrize(
    "query_string",
    ["userId=alice", "input%5BuserId%5D=alice", "input[userId]=alice&input[limit]=2", "inputs={}"],
)
def test_a_query_without_json_input_is_told_how_to_send_it(client, auth, query_string):
    # Form fields and deep objects, as OpenAPI generators send a query's input.
    resp = client.get(f"/trpc/memory.getAll?{query_string}", headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.getAll")
    assert error["message"].endswith("; send ?input=<URL-encoded JSON object>")


def test_a_mutation_without_input_is_not_told_about_query_strings(client, auth):
    resp = client.post("/trpc/memory.add", headers={**auth, "Content-Type": "application/json"})
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert "?input" not in error["message"]


@pytest.mark.parametrize(
    "raw, received",
    [("5", "number"), ("[1,2]", "array"), ('"s"', "string"), ("null", "null"), ("true", "boolean")],
)
def test_a_procedure_without_input_refuses_a_non_object_as_the_others_do(
    client, auth, raw, received
):
    resp = client.get("/trpc/service.info", query_string={"input": raw}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "service.info")
    assert error["message"] == f"Invalid input: expected object, received {received}"
    resp = client.get(
        "/trpc/service.info,memory.getAll",
        query_string={"batch": "1", "input": f'{{"0":{raw},"1":{{"userId":"u"}}}}'},
        headers=auth,
    )
    first, second = resp.get_json()
    assert resp.status_code == 207
    assert_error_item(first, 400, "BAD_REQUEST", "service.info")
    assert second["result"]["data"] == []


@pytest.mark.parametrize("input", [None, {}, {"whatever": 1}])
def test_a_procedure_without_input_takes_none_or_an_object(client, auth, input):
    assert data(query(client, "service.info", input, headers=auth))["embedder"]["dimensions"]
    resp = client.get(
        "/trpc/service.info",
        query_string={"batch": "1", "input": "{}" if input is None else json.dumps({"0": input})},
        headers=auth,
    )
    assert resp.status_code == 200, resp.get_json()


def test_unknown_fields_are_ignored(client, auth):
    resp = mutate(
        client, "memory.add", {"userId": "u", "content": "x", "color": "red"}, headers=auth
    )
    assert "color" not in data(resp)


# -- batches -------------------------------------------------------------------


def test_get_batch_all_ok_is_200_array(client, auth):
    m = data(mutate(client, "memory.add", {"userId": "u1", "content": "batch me"}, headers=auth))
    resp = batch_get(
        client,
        ["memory.getById", "memory.getAll"],
        {"0": {"id": m["id"]}, "1": NOBODY},
        headers=auth,
    )
    assert resp.status_code == 200
    assert resp.get_json() == [{"result": {"data": m}}, {"result": {"data": []}}]


def test_batch_of_one_is_still_an_array(client, auth):
    resp = batch_get(client, ["memory.getAll"], {"0": NOBODY}, headers=auth)
    assert resp.status_code == 200
    assert resp.data == b'[{"result":{"data":[]}}]'


def test_get_batch_mixed_outcomes_is_207(client, auth):
    m = data(mutate(client, "memory.add", {"userId": "u1", "content": "x"}, headers=auth))
    resp = batch_get(
        client,
        ["memory.getById", "memory.getById"],
        {"0": {"id": m["id"]}, "1": {"id": MISSING_ID}},
        headers=auth,
    )
    assert resp.status_code == 207
    ok, missing = resp.get_json()
    assert ok == {"result": {"data": m}}
    assert_error_item(missing, 404, "NOT_FOUND", "memory.getById")


def test_post_batch_runs_each_mutation(client, auth):
    resp = batch_post(
        client,
        ["memory.add", "memory.add"],
        {"0": {"userId": "u1", "content": "one"}, "1": {"userId": "u1", "content": "two"}},
        headers=auth,
    )
    assert resp.status_code == 200
    contents = [item["result"]["data"]["content"] for item in resp.get_json()]
    assert contents == ["one", "two"]
    listed = data(query(client, "memory.getAll", {"userId": "u1"}, headers=auth))
    assert [m["content"] for m in listed] == ["two", "one"]


def test_post_batch_mixed_is_207_and_the_success_sticks(client, auth):
    resp = batch_post(
        client,
        ["memory.add", "memory.delete"],
        {"0": {"userId": "u1", "content": "in a batch"}, "1": {"id": MISSING_ID}},
        headers=auth,
    )
    assert resp.status_code == 207
    added, missing = resp.get_json()
    assert added["result"]["data"]["content"] == "in a batch"
    assert_error_item(missing, 404, "NOT_FOUND", "memory.delete")
    assert len(data(query(client, "memory.getAll", {"userId": "u1"}, headers=auth))) == 1


def test_batch_of_two_different_errors_is_207(client, auth):
    resp = batch_post(
        client,
        ["memory.delete", "memory.add"],
        {"0": {"id": MISSING_ID}, "1": {"userId": "u1"}},
        headers=auth,
    )
    assert resp.status_code == 207
    first, second = resp.get_json()
    assert_error_item(first, 404, "NOT_FOUND", "memory.delete")
    assert_error_item(second, 400, "BAD_REQUEST", "memory.add")


def test_batch_with_the_same_error_everywhere_has_that_status(client, auth):
    resp = batch_post(
        client,
        ["memory.delete", "memory.delete"],
        {"0": {"id": MISSING_ID}, "1": {"id": MISSING_ID}},
        headers=auth,
    )
    assert resp.status_code == 404
    for item in resp.get_json():
        assert_error_item(item, 404, "NOT_FOUND", "memory.delete")


def test_batch_without_key_is_401_per_item(client):
    resp = batch_get(client, ["memory.getAll", "memory.getAll"], {"0": NOBODY, "1": NOBODY})
    assert resp.status_code == 401
    for item in resp.get_json():
        assert_error_item(item, 401, "UNAUTHORIZED", "memory.getAll")


def test_batch_with_unknown_procedure_is_207(client, auth):
    resp = batch_get(client, ["memory.getAll", "memory.nope"], {"0": NOBODY}, headers=auth)
    assert resp.status_code == 207
    ok, missing = resp.get_json()
    assert ok == {"result": {"data": []}}
    assert_error_item(missing, 404, "NOT_FOUND", "memory.nope")


def test_batch_mixing_queries_and_mutations_is_one_400_without_path(client, auth):
    resp = batch_get(client, ["memory.getAll", "memory.add"], {"0": NOBODY, "1": {}}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", None)
    assert error["message"] == "Cannot mix procedure types in call: query, mutation"


@pytest.mark.parametrize("inputs", [[1, 2], 5, "x", None])
def test_batch_with_non_object_input_is_400_per_item(client, auth, inputs):
    resp = client.get(
        "/trpc/memory.getAll,memory.getAll",
        query_string={"batch": "1", "input": json.dumps(inputs)},
        headers=auth,
    )
    assert resp.status_code == 400
    for item in resp.get_json():
        assert_error_item(item, 400, "BAD_REQUEST", "memory.getAll")
        assert item["error"]["message"] == '"input" needs to be an object when doing a batch call'


def test_batch_with_malformed_input_is_400_per_item(client, auth):
    resp = client.get("/trpc/memory.getAll,memory.getAll?batch=1&input=%7bbad", headers=auth)
    assert resp.status_code == 400
    assert len(resp.get_json()) == 2
    for item in resp.get_json():
        assert_error_item(item, 400, "BAD_REQUEST", "memory.getAll")


def test_batch_item_without_input_is_undefined(client, auth):
    resp = batch_get(client, ["memory.getAll", "memory.getAll"], {"1": NOBODY}, headers=auth)
    assert resp.status_code == 207
    missing, ok = resp.get_json()
    assert_error_item(missing, 400, "BAD_REQUEST", "memory.getAll")
    assert missing["error"]["message"].endswith("received undefined")
    assert ok == {"result": {"data": []}}


def test_batch_over_the_size_limit_is_refused_whole(make_app):
    client = make_app(MAX_BATCH_SIZE=3).test_client()
    resp = batch_get(client, ["memory.getAll"] * 4, {})
    error = assert_error(resp, 400, "BAD_REQUEST", None)
    assert "maximum size" in error["message"]


def test_batch_items_are_validated_on_their_own(client, auth):
    resp = batch_get(
        client,
        ["memory.getAll", "memory.getAll", "memory.getAll"],
        {"0": NOBODY, "1": {"userId": "x", "limit": 0}, "2": {"userId": 5}},
        headers=auth,
    )
    assert resp.status_code == 207
    ok, bad_limit, bad_user = resp.get_json()
    assert ok == {"result": {"data": []}}
    assert "limit" in bad_limit["error"]["message"]
    assert "userId" in bad_user["error"]["message"]


def test_errors_outside_trpc_use_the_same_envelope(client):
    assert_error(client.get("/nope"), 404, "NOT_FOUND", None)
    resp = client.post("/health")
    assert_error(resp, 405, "METHOD_NOT_SUPPORTED", None)
    assert "GET" in resp.headers["Allow"]


def test_uuid_paths_accept_upper_case(client, auth):
    m = data(mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth))
    got = data(query(client, "memory.getById", {"id": m["id"].upper()}, headers=auth))
    assert got == m
    assert str(uuid.UUID(got["id"])) == got["id"]

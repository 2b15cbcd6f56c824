"""GET /openapi.json: a valid OpenAPI 3.1 document that says exactly what the server does.

Inputs are generated from the marshmallow schemas that validate requests, so
these tests check the mapping (types, limits from the settings, nullability,
the filter grammar) and that a new field or procedure appears by itself.
Outputs are declared field by field beside the code that writes them
(memsvc/api/outputs.py, memsvc/wire.py), so every procedure is called here
and its answer checked against the document.
"""

from __future__ import annotations

import json
import time

import pytest
from jsonschema import Draft202012Validator
from marshmallow import fields
from marshmallow import validate
from openapi_spec_validator import validate as validate_spec

from memsvc.api import inputs
from memsvc.api import middleware
from memsvc.api import openapi
from memsvc.api import outputs
from memsvc.api.context import runtime
from memsvc.api.procedures import MUTATION
from memsvc.api.procedures import QUERY
from memsvc.api.procedures import Procedure
from memsvc.errors import Forbidden
from memsvc.search import filters
from memsvc.tokens import LocalVerifier
from tests.support import fake_llm
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query
from tests.support.openapi import input_schema
from tests.support.openapi import operation
from tests.support.openapi import problems
from tests.support.openapi import response_schema

SECRET = "j" * 40
MISSING_ID = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def llm():
    with fake_llm.FakeModel() as model:
        yield model


@pytest.fixture
def app(make_app, llm):
    return make_app(JWT_SECRET=SECRET, LLM_URL=llm.url, LLM_MODEL="m")


@pytest.fixture
def doc(client):
    resp = client.get("/openapi.json")
    assert resp.status_code == 200
    return resp.get_json()


def bearer(tenant: str = "tenant-A") -> dict[str, str]:
    return {"Authorization": f"Bearer {LocalVerifier(SECRET).mint(tenant)}"}


def component(doc: dict, name: str) -> dict:
    return doc["components"]["schemas"][name]


# -- the document ------------------------------------------------------------------


def test_the_document_needs_no_key_and_is_valid_openapi_3_1(client):
    resp = client.get("/openapi.json")
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/json"
    doc = resp.get_json()
    assert doc["openapi"] == "3.1.0"
    validate_spec(doc)


def test_the_validator_would_notice_a_broken_document(doc):
    # The check above can fail: a response without its description is invalid.
    del doc["paths"]["/health"]["get"]["responses"]["200"]["description"]
    with pytest.raises(Exception, match="description"):
        validate_spec(doc)


def test_every_procedure_is_the_http_call_it_is(app, doc):
    registry = app.extensions["trpc"]
    assert {p for p in doc["paths"] if p.startswith("/trpc/")} == {f"/trpc/{p}" for p in registry}
    for path, proc in registry.items():
        methods = doc["paths"][f"/trpc/{path}"]
        assert list(methods) == (["post"] if proc.type == MUTATION else ["get"])
        op = methods["post" if proc.type == MUTATION else "get"]
        assert (op["x-trpc-procedure"], op["x-trpc-type"]) == (path, proc.type)
        if path == "keys.list":
            # It declares no input, as in the API's specification: whatever a call
            # carries is ignored, and the document names no parameter.
            assert proc.input is None and "parameters" not in op
            continue
        # Every other procedure validates its input; service.info and memory.users (whose
        # fields are all optional) take an object or nothing.
        assert proc.input is not None
        assert proc.input_optional == (path in {"service.info", "memory.users"})
        if proc.type == QUERY:
            [param] = op["parameters"]
            required = not proc.input_optional
            assert (param["name"], param["in"], param["required"]) == ("input", "query", required)
            assert list(param["content"]) == ["application/json"]
        else:
            assert op["requestBody"]["required"] is True
            assert list(op["requestBody"]["content"]) == ["application/json"]


def test_success_answers_are_the_result_envelope(doc):
    schema = response_schema(doc, "memory.getById", 200)
    assert schema["properties"]["result"]["properties"]["data"] == {
        "$ref": "#/components/schemas/Memory"
    }


@pytest.mark.parametrize(
    "procedure, statuses",
    [
        ("memory.add", ["200", "400", "401", "413", "415", "429", "500", "503"]),
        ("memory.search", ["200", "400", "401", "413", "429", "500", "503"]),
        ("memory.getById", ["200", "400", "401", "404", "413", "429", "500", "503"]),
        ("memory.update", ["200", "400", "401", "404", "413", "415", "429", "500", "503"]),
        ("memory.deleteAll", ["200", "400", "401", "413", "415", "429", "500", "503"]),
        ("keys.list", ["200", "400", "401", "413", "429", "500", "503"]),
        ("keys.create", ["200", "400", "401", "403", "413", "415", "429", "500", "503"]),
        ("keys.revoke", ["200", "400", "401", "404", "413", "415", "429", "500", "503"]),
        ("service.info", ["200", "400", "401", "413", "429", "500", "503"]),
    ],
)
def test_each_procedure_lists_the_statuses_it_can_answer(doc, procedure, statuses):
    assert list(operation(doc, procedure)["responses"]) == statuses


def test_errors_share_one_envelope_with_string_codes(doc):
    responses = doc["components"]["responses"]
    for response in responses.values():
        assert response["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorEnvelope"
        }
    assert list(responses["TooManyRequests"]["headers"]) == ["Retry-After"]
    assert list(responses["ServiceUnavailable"]["headers"]) == ["Retry-After"]
    assert "NOT_FOUND" in component(doc, "ErrorCode")["enum"]


def test_memory_and_service_take_an_api_key_and_keys_a_bearer_token(app, doc):
    schemes = doc["components"]["securitySchemes"]
    assert schemes["apiKey"] == {"type": "apiKey", "in": "header", "name": "x-api-key"}
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    for path in app.extensions["trpc"]:
        expected = [{"bearer": []}] if path.startswith("keys.") else [{"apiKey": []}]
        assert operation(doc, path)["security"] == expected, path
    assert doc["paths"]["/health"]["get"]["security"] == []


def test_batches_are_described(doc):
    assert "?batch=1" in doc["info"]["description"]
    assert "At most 100 calls per batch" in doc["info"]["description"]


# -- inputs, from the marshmallow schemas ------------------------------------------


def test_inputs_carry_types_limits_and_defaults(doc):
    search = input_schema(doc, "memory.search")
    search = component(doc, search["$ref"].rsplit("/", 1)[1])
    assert search["required"] == ["userId", "query"]
    props = search["properties"]
    assert props["userId"]["type"] == "string" and props["userId"]["maxLength"] == 256
    assert props["query"]["maxLength"] == 65_536 and props["query"]["minLength"] == 1
    assert props["limit"] == {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}
    # Its default depends on the mode (none in keyword mode): described, not declared.
    assert {k: v for k, v in props["threshold"].items() if k != "description"} == {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
    }
    assert "no floor in keyword mode" in props["threshold"]["description"]
    assert props["explain"] == {
        "type": "boolean",
        "default": False,
        "description": "Also answer, per result, why it ranked where it did.",
    }
    assert props["filter"] == {"anyOf": [{"$ref": "#/components/schemas/Filter"}, {"type": "null"}]}
    assert props["createdAfter"]["format"] == "date-time"


def test_limits_and_defaults_are_the_servers_settings(make_app):
    app = make_app(MAX_USER_ID_CHARS=10, MAX_CONTENT_CHARS=500)
    doc = app.test_client().get("/openapi.json").get_json()
    props = component(doc, "SearchInput")["properties"]
    assert props["userId"]["maxLength"] == 10
    assert props["query"]["maxLength"] == 500


def test_update_fields_that_clear_with_null_are_nullable(doc):
    props = component(doc, "UpdateInput")["properties"]
    assert props["metadata"]["type"] == ["object", "null"]
    assert props["expiresAt"]["type"] == ["string", "null"]
    assert props["content"]["type"] == "string"
    assert component(doc, "UpdateInput")["required"] == ["id"]


def test_a_new_procedure_and_its_fields_appear_by_themselves(app):
    class NewInput(inputs.Input):
        userId = inputs.Text("MAX_USER_ID_CHARS", required=True)
        mode = fields.String(
            load_default="semantic", validate=validate.OneOf(["semantic", "keyword", "hybrid"])
        )
        tags = fields.List(fields.String(validate=validate.Length(max=5)), load_default=list)
        weight = inputs.Number(allow_none=True, validate=validate.Range(0, 1, min_inclusive=False))
        flag = inputs.Flag(load_default=False)

    proc = Procedure(
        "memory.brandNew", QUERY, lambda call, params: [], NewInput(), outputs.MEMORIES
    )
    app.extensions["trpc"]["memory.brandNew"] = proc
    doc = openapi.document(app)
    validate_spec(doc)
    assert doc["paths"]["/trpc/memory.brandNew"]["get"]["x-trpc-type"] == "query"
    props = doc["components"]["schemas"]["NewInput"]["properties"]
    assert props["mode"] == {
        "type": "string",
        "enum": ["semantic", "keyword", "hybrid"],
        "default": "semantic",
    }
    assert props["tags"] == {
        "type": "array",
        "items": {"type": "string", "maxLength": 5},
        "default": [],
    }
    assert props["weight"] == {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1}
    assert props["flag"] == {"type": "boolean", "default": False}
    # Its answer is what its declaration says.
    assert response_schema(doc, "memory.brandNew", 200)["properties"]["result"]["properties"][
        "data"
    ] == {"type": "array", "items": {"$ref": "#/components/schemas/Memory"}}


def test_a_procedures_statuses_and_credential_come_from_its_declaration(app):
    proc = Procedure(
        "keys.brandNew",
        MUTATION,
        lambda call, params: {"success": True},
        None,
        outputs.SUCCESS,
        (middleware.bearer_token, middleware.tenant_limited),
        (Forbidden,),
    )
    app.extensions["trpc"]["keys.brandNew"] = proc
    doc = openapi.document(app)
    validate_spec(doc)
    op = operation(doc, "keys.brandNew")
    # Common to every mutation: 400, 413, 415, 500, 503; its middleware's:
    # 401, 429; its own: 403.
    assert list(op["responses"]) == ["200", "400", "401", "403", "413", "415", "429", "500", "503"]
    assert op["security"] == [{"bearer": []}]
    assert proc.statuses(common=False) == [401, 403, 429]


GOOD_FILTERS = [
    {},
    {"category": "sport"},
    {"n": 3, "flag": True, "nothing": None, "list": [1, 2]},
    {"a.b": {"eq": {"x": 1}}},
    {"tags": {"contains": "running"}, "n": {"gte": 2}},
    {"at": {"lt": "2026-11-23T10:00:00Z"}, "k": {"in": ["a", "b"]}, "j": {"nin": []}},
    {"k": {"exists": False}, "m": {"ne": "x"}},
]
BAD_FILTERS = [
    [],
    "sport",
    {"k": {"eq": 1, "ne": 2}},
    {"k": {"like": "x"}},
    {"k": {}},
    {"k": {"in": "a"}},
    {"k": {"exists": "yes"}},
    {"k": {"gt": True}},
    {"a..b": 1},
    {"": 1},
]


@pytest.mark.parametrize("value", GOOD_FILTERS, ids=json.dumps)
def test_the_filter_schema_accepts_filters_the_server_accepts(doc, value):
    filters.parse(value)
    assert problems(doc, {"$ref": "#/components/schemas/Filter"}, value) == []


@pytest.mark.parametrize("value", BAD_FILTERS, ids=json.dumps)
def test_the_filter_schema_refuses_filters_the_server_refuses(doc, value):
    with pytest.raises(filters.InvalidFilter):
        filters.parse(value)
    assert problems(doc, {"$ref": "#/components/schemas/Filter"}, value) != []


# -- outputs: every procedure's answer, checked against the document ---------------


def test_every_procedure_answers_what_the_document_says(app, client, doc):
    """Each procedure called with valid input; its input and answer checked against the doc."""
    called: set[str] = set()
    token = bearer()

    def call(procedure: str, input: dict | None, headers: dict) -> object:
        if input is not None:
            assert problems(doc, input_schema(doc, procedure), input) == [], procedure
        if operation(doc, procedure)["x-trpc-type"] == MUTATION:
            resp = mutate(client, procedure, input, headers=headers)
        else:
            resp = query(client, procedure, input, headers=headers)
        body = resp.get_json()
        assert problems(doc, response_schema(doc, procedure, 200), body) == [], body
        called.add(procedure)
        return data(resp)

    created = call("keys.create", {"name": "docs"}, token)
    key = {"x-api-key": created["secret"]}
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    m = call(
        "memory.add",
        {"userId": "u", "content": "Bob runs", "metadata": {"n": 1}, "expiresAt": later},
        key,
    )
    call("memory.add", {"userId": "u", "content": "Bob swims", "dedupe": True}, key)
    call("memory.search", {"userId": "u", "query": "sport", "threshold": 0}, key)
    call("memory.search", {"userId": "u", "query": "x", "filter": {"n": {"gte": 1}}}, key)
    call("memory.getAll", {"userId": "u", "limit": 1}, key)
    call(
        "memory.getAll",
        {"userId": "u", "cursor": m["id"], "createdAfter": "2020-01-01T00:00:00Z"},
        key,
    )
    call("memory.getById", {"id": m["id"]}, key)
    call("memory.update", {"id": m["id"], "metadata": None, "expiresAt": None}, key)
    call("memory.update", {"id": m["id"], "content": "Bob runs marathons"}, key)
    assert len(call("memory.history", {"id": m["id"]}, key)) == 3  # type: ignore[arg-type]
    call("service.info", None, key)
    call("memory.users", None, key)
    call("memory.users", {"prefix": "u", "limit": 5}, key)
    call(
        "memory.add",
        {"userId": "u", "content": "Bob ran", "occurredAt": "2020-01-01T10:00:00Z"},
        key,
    )
    talk = [
        {"role": "user", "name": "Bob", "content": "I ran 10k yesterday", "id": "m1",
         "at": "2026-03-10T19:30:00+01:00"},
        {"role": "assistant", "content": "Well done!"},
    ]  # fmt: skip
    ingested = call("memory.ingest", {"userId": "u", "sessionId": "s", "messages": talk}, key)
    call("memory.ingest", {"userId": "u", "sessionId": "s", "messages": talk[:1]}, key)
    call("memory.sessions", {"userId": "u", "limit": 10}, key)
    call("memory.session", {"userId": "u", "sessionId": "s", "after": 0}, key)
    call(
        "memory.getAll",
        {"userId": "u", "kinds": ["message"], "occurredAfter": "2020-01-01T00:00:00Z"},
        key,
    )
    call(
        "memory.update",
        {"id": ingested["memories"][0]["id"], "occurredAt": "2026-03-10T19:00:00+01:00"},  # type: ignore[index]
        key,
    )
    talk = [{"role": "user", "content": "I live in Berlin"}]
    extracted = call("memory.ingest", {"userId": "u", "messages": talk, "extract": True}, key)
    job_id = extracted["job"]["id"]  # type: ignore[index]
    call("memory.job", {"id": job_id}, key)
    with app.app_context():
        runtime().extraction.run_due()
    call("memory.job", {"id": job_id}, key)
    call("memory.jobs", {"userId": "u", "status": "done", "limit": 5}, key)
    call("memory.jobs", {"cursor": job_id}, key)
    call("memory.retryJob", {"id": job_id}, key)
    [fact] = call("memory.getAll", {"userId": "u", "kinds": ["fact"]}, key)  # type: ignore[misc]
    call("memory.delete", {"id": m["id"]}, key)
    call("memory.deleteAll", {"userId": "u"}, key)
    call("keys.list", None, token)
    call("keys.setLimits", {"id": created["id"], "rateLimit": 5, "concurrencyLimit": None}, token)
    call("keys.revoke", {"id": created["id"]}, token)
    assert called == set(app.extensions["trpc"]), "call every procedure here"


@pytest.mark.parametrize(
    "procedure, input, status, code",
    [
        ("memory.getById", {"id": MISSING_ID}, 404, "NOT_FOUND"),
        ("memory.add", {"userId": "u"}, 400, "BAD_REQUEST"),
        ("memory.update", {"id": MISSING_ID, "content": "x"}, 404, "NOT_FOUND"),
        ("keys.revoke", {"id": MISSING_ID}, 404, "NOT_FOUND"),
    ],
)
def test_error_answers_are_the_documented_envelope(
    client, doc, key, procedure, input, status, code
):
    headers = bearer() if procedure.startswith("keys.") else {"x-api-key": key}
    if operation(doc, procedure)["x-trpc-type"] == MUTATION:
        resp = mutate(client, procedure, input, headers=headers)
    else:
        resp = query(client, procedure, input, headers=headers)
    assert_error(resp, status, code, procedure)
    assert str(status) in operation(doc, procedure)["responses"]
    assert problems(doc, response_schema(doc, procedure, status), resp.get_json()) == []


def test_health_answers_what_the_document_says(client, doc):
    body = client.get("/health").get_json()
    schema = doc["paths"]["/health"]["get"]["responses"]["200"]["content"]["application/json"]
    assert problems(doc, schema["schema"], body) == []


def test_answers_take_fields_a_later_memsvc_adds(doc):
    # A client generated from today's document must read tomorrow's answers.
    def open_objects(node: object) -> int:
        if isinstance(node, list):
            return sum(open_objects(n) for n in node)
        if not isinstance(node, dict):
            return 0
        assert node.get("additionalProperties") is not False, node
        return ("properties" in node) + sum(open_objects(v) for v in node.values())

    schemas = doc["components"]["schemas"]
    answers = [op["responses"] for methods in doc["paths"].values() for op in methods.values()]
    assert open_objects(answers) >= len(doc["paths"]) - 1  # every result envelope
    assert open_objects([schemas[n] for n in ("Memory", "SearchResult", "ErrorEnvelope")]) > 3
    assert "**Compatibility.**" in doc["info"]["description"]
    memory = {
        "id": MISSING_ID,
        "content": "x",
        "userId": "u",
        "idpUserId": "t",
        "metadata": {},
        "createdAt": "2026-11-23T04:08:00.123Z",
        "updatedAt": "2026-11-23T04:08:00.123Z",
        "addedLater": 1,
    }
    schema = {"$ref": "#/components/schemas/Memory", "components": doc["components"]}
    assert list(Draft202012Validator(schema).iter_errors(memory)) == []


def test_every_array_schema_says_what_it_holds(doc):
    def arrays(node: object, where: str) -> list[str]:
        if isinstance(node, list):
            return [a for i, n in enumerate(node) for a in arrays(n, f"{where}/{i}")]
        if not isinstance(node, dict):
            return []
        kind = node.get("type")
        found = [where] if (kind == "array" or "array" in (kind or [])) else []
        assert not found or "items" in node, where
        return found + [a for k, v in node.items() for a in arrays(v, f"{where}/{k}")]

    found = arrays(doc, "#")
    assert "#/components/schemas/FilterCondition/anyOf/0" in found


def test_an_answer_with_an_undescribed_field_would_fail(doc):
    # Today's answers are held to exactly their described fields (problems()
    # closes the document's open objects): one the server added would be caught.
    memory = {
        "id": MISSING_ID,
        "content": "x",
        "userId": "u",
        "idpUserId": "t",
        "metadata": {},
        "createdAt": "2026-11-23T04:08:00.123Z",
        "updatedAt": "2026-11-23T04:08:00.123Z",
    }
    schema = {"$ref": "#/components/schemas/Memory"}
    assert problems(doc, schema, memory) == []
    assert problems(doc, schema, {**memory, "surprise": 1}) != []
    assert problems(doc, schema, {**memory, "expiresAt": "10000-01-01T00:00:00.000Z"}) != []


# -- bugs the conformance tests found ----------------------------------------------


@pytest.mark.parametrize(
    "when", ["9999-12-31T23:59:59-23:59", "9999-12-31T23:30:00-01:00", "0001-01-01T00:00:00+01:00"]
)
def test_a_timestamp_outside_years_1_to_9999_in_utc_is_refused(client, auth, when):
    # Was stored, then shown as "10000-01-01T...Z", which is not a timestamp
    # any ISO 8601 reader (or the document's date-time) accepts.
    resp = mutate(
        client, "memory.add", {"userId": "u", "content": "x", "expiresAt": when}, headers=auth
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert "expiresAt: must be within the years 0001 to 9999 in UTC" in error["message"]


def test_the_latest_timestamp_in_utc_is_still_taken(client, auth):
    resp = mutate(
        client,
        "memory.add",
        {"userId": "u", "content": "x", "expiresAt": "9999-12-31T23:59:59.999Z"},
        headers=auth,
    )
    assert data(resp)["expiresAt"] == "9999-12-31T23:59:59.999Z"

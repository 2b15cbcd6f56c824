"""``GET /openapi.json``: an OpenAPI 3.1 document of every procedure, as the HTTP call it is.

The document is built from the procedures' declarations (:mod:`.procedures`,
registered in ``app.extensions["trpc"]``) and nothing else, so it cannot
drift from what the server does: each procedure's input from the very
marshmallow schema that validates it (:mod:`.openapi_inputs`), with the
size limits of this server's settings; its answer from its output's JSON Schema and
components; its error statuses from its type, its middleware and its own
declared errors; its credential from its middleware. A query is
``GET /trpc/<procedure>`` with its input as URL-encoded JSON in the
``input`` parameter; a mutation is ``POST /trpc/<procedure>`` with a JSON
body. The tests check live answers against the document.
"""

from __future__ import annotations

import typing as t

from flask import Blueprint
from flask import Flask
from flask import Response
from flask import current_app

from .. import wire
from .._version import __version__
from ..errors import HTTP_STATUS
from . import health
from . import openapi_inputs
from .openapi_inputs import ref
from .procedures import MUTATION
from .procedures import Procedure
from .procedures import Router
from .trpc import json_response

bp = Blueprint("openapi", __name__)

JSON = "application/json"
Json = dict[str, t.Any]


def _error_components() -> dict[str, Json]:
    """The envelope every error is answered in (:func:`.trpc.error_body`)."""
    error_code = {"type": "string", "enum": list(HTTP_STATUS)}
    return {
        "ErrorCode": error_code,
        "ErrorEnvelope": wire.object_schema(
            {
                "error": wire.object_schema(
                    {
                        "message": {"type": "string", "description": "For people."},
                        "code": ref("ErrorCode"),
                        "data": wire.object_schema(
                            {
                                "code": ref("ErrorCode"),
                                "httpStatus": {
                                    "type": "integer",
                                    "enum": list(HTTP_STATUS.values()),
                                },
                                "path": {
                                    "type": "string",
                                    "description": "The procedure that failed; absent when "
                                    "none could be named.",
                                },
                            },
                            ["code", "httpStatus"],
                        ),
                    },
                    ["message", "code", "data"],
                )
            },
            ["error"],
            description="Every error, whatever its cause. The code is a string (tRPC puts "
            "numbers there); the HTTP status equals data.httpStatus.",
        ),
    }


def _add(components: dict[str, Json], name: str, schema: Json) -> None:
    if components.setdefault(name, schema) != schema:
        raise ValueError(f"two different schemas are named {name}")


# -- the document ------------------------------------------------------------------


_ERRORS = {
    400: (
        "BadRequest",
        "Invalid input (the message names the field and the rule), malformed "
        "JSON, a malformed HTTP request.",
    ),
    401: ("Unauthorized", "Missing, unknown or revoked credential."),
    403: ("Forbidden", "The tenant already has its most active API keys; revoke one first."),
    404: ("NotFound", "No such record in the caller's tenant."),
    413: (
        "PayloadTooLarge",
        "The request body is larger than the server accepts, or the answers would exceed "
        "what one request may return (ask for fewer memories and page).",
    ),
    415: ("UnsupportedMediaType", "The Content-Type is not application/json."),
    429: (
        "TooManyRequests",
        "A limit of the API key was reached; Retry-After says how many seconds to wait.",
    ),
    500: (
        "InternalServerError",
        "The embedding provider failed, or something unexpected (logged on the server).",
    ),
    503: (
        "ServiceUnavailable",
        "The embedding provider is slow and this worker's waiting room is full, or the "
        "database cannot take the call (Storage unavailable: ...); Retry-After says when "
        "to try again.",
    ),
}


def _error_responses() -> Json:
    retry_after = {
        "Retry-After": {
            "description": "Seconds to wait before trying again.",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
        }
    }
    out = {}
    for status, (name, description) in _ERRORS.items():
        response: Json = {
            "description": description,
            "content": {JSON: {"schema": ref("ErrorEnvelope")}},
        }
        if status in (429, 503):
            response["headers"] = retry_after
        out[name] = response
    return out


def _operation(proc: Procedure, input_name: str | None) -> Json:
    router, _, name = proc.path.partition(".")
    result = wire.object_schema(
        {"result": wire.object_schema({"data": proc.output.schema}, ["data"])}, ["result"]
    )
    op: Json = {
        "operationId": router + name[:1].upper() + name[1:],
        "summary": f"{proc.path} ({proc.type})",
        "tags": [router],
        "x-trpc-procedure": proc.path,
        "x-trpc-type": proc.type,
        "security": [] if proc.credential is None else [{proc.credential.name: []}],
    }
    if input_name is not None:
        body = {"schema": ref(input_name)}
        if proc.type == MUTATION:
            op["requestBody"] = {"required": not proc.input_optional, "content": {JSON: body}}
        else:
            op["parameters"] = [
                {
                    "name": "input",
                    "in": "query",
                    "required": not proc.input_optional,
                    "description": "The input object as JSON, URL-encoded: "
                    '?input=%7B%22userId%22%3A%22alice%22%7D for {"userId":"alice"}. '
                    "Not as form fields (?userId=alice) nor as a deep object "
                    "(?input[userId]=alice).",
                    "content": {JSON: body},
                }
            ]
    op["responses"] = {
        "200": {"description": "The procedure's result.", "content": {JSON: {"schema": result}}},
        **{
            str(status): {"$ref": f"#/components/responses/{_ERRORS[status][0]}"}
            for status in proc.statuses()
        },
    }
    return op


_DESCRIPTION = """\
memsvc stores text memories per end user of an AI application and searches them by meaning.
It speaks tRPC over HTTP: a query is `GET /trpc/<procedure>?input=<URL-encoded JSON>`, a
mutation is `POST /trpc/<procedure>` with a JSON body. Success is `{"result": {"data": ...}}`;
failure is the `ErrorEnvelope` with a string code and the status it names.

**Batches.** Several calls of one kind travel in one request, as tRPC's httpBatchLink sends
them: the procedures comma-separated in the path and `?batch=1`, the inputs in one object keyed
by position (`"0"`, `"1"`, ...), for queries in the `input` parameter, for mutations as the
body: `GET /trpc/memory.getAll,memory.getById?batch=1&input={"0":{...},"1":{...}}`. The answer
is an array with one envelope per call, in order; its status is the calls' common status, or
207 when they differ. At most {max_batch} calls per batch.

**Compatibility.** A later memsvc may add fields to any answer (it has added `expiresAt`
and `matchedBy`), so answers' objects do not forbid other properties: a client should ignore
fields it does not know. In inputs, a field the server does not know is ignored, as tRPC's
validators do.

Limits and defaults shown are this server's settings.
"""


# Any request can be refused before it reaches its route, /health's too: a
# malformed HTTP request is answered 400 in the error envelope by memsvc's
# worker (memsvc/serving/worker.py).
_MALFORMED = {"$ref": "#/components/responses/BadRequest"}


def document(app: Flask) -> Json:
    """The OpenAPI 3.1 document of ``app``'s procedures, with its settings' limits."""
    registry: dict[str, Procedure] = app.extensions["trpc"]
    routers: list[Router] = app.extensions["trpc_routers"]
    components: dict[str, Json] = {**_error_components(), **openapi_inputs.filter_components()}
    _add(components, health.HEALTH.name, health.HEALTH.schema)
    security: dict[str, Json] = {}
    paths: Json = {}
    with app.app_context():
        for path in sorted(registry):
            proc = registry[path]
            for component in proc.output.components:
                _add(components, component.name, component.schema)
            if proc.credential is not None:
                security[proc.credential.name] = proc.credential.scheme
            input_name = None
            if proc.input is not None:
                input_name = type(proc.input).__name__
                _add(components, input_name, openapi_inputs.input_schema(proc.input))
            method = "post" if proc.type == MUTATION else "get"
            paths[f"/trpc/{path}"] = {method: _operation(proc, input_name)}
        description = _DESCRIPTION.replace("{max_batch}", str(app.config["MAX_BATCH_SIZE"]))
    paths["/health"] = {
        "get": {
            "operationId": "health",
            "summary": "Is the service up, and can it read its database?",
            "tags": ["health"],
            "security": [],
            "responses": {
                "200": {"description": "Up.", "content": {JSON: {"schema": health.HEALTH.ref}}},
                "400": _MALFORMED,
                "503": {
                    "description": "The database cannot be read.",
                    "content": {JSON: {"schema": health.HEALTH.ref}},
                },
            },
        }
    }
    paths["/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document.",
            "tags": ["health"],
            "security": [],
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1.",
                    "content": {JSON: {"schema": {"type": "object"}}},
                },
                "400": _MALFORMED,
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "memsvc",
            "version": __version__,
            "description": description,
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "servers": [{"url": "/"}],
        "tags": [
            *({"name": r.name, "description": r.description} for r in routers),
            {"name": "health", "description": "No credentials."},
        ],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "responses": _error_responses(),
            "securitySchemes": dict(sorted(security.items())),
        },
    }


@bp.get("/openapi.json")
def openapi_json() -> Response:
    """The document, for this server's procedures and settings."""
    # Built once per worker: the registry and the settings do not change while it runs.
    cached = current_app.extensions.get("openapi")
    if cached is None:
        cached = current_app.extensions["openapi"] = document(current_app)
    return json_response(cached)

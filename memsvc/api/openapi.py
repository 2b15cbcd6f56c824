"""``GET /openapi.json``: an OpenAPI 3.1 document of every procedure, as the HTTP call it is.

The document is built from the procedures' declarations (:mod:`.procedures`,
registered in ``app.extensions["trpc"]``) and nothing else, so it cannot
drift from what the server does: each procedure's input from the very
marshmallow schema that validates it, with the size limits of this
server's settings; its answer from its output's JSON Schema and
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
from marshmallow import Schema
from marshmallow import fields
from marshmallow import missing
from marshmallow import validate

from .. import __version__
from .. import wire
from ..errors import HTTP_STATUS
from ..search.filters import OPERATORS
from . import health
from . import schemas
from .procedures import MUTATION
from .procedures import Procedure
from .procedures import Router
from .trpc import json_response

bp = Blueprint("openapi", __name__)

JSON = "application/json"
Json = dict[str, t.Any]


def ref(name: str) -> Json:
    """A reference to a schema of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def _array(items: Json) -> Json:
    return {"type": "array", "items": items}


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


# -- inputs: from the marshmallow schemas ------------------------------------------


def _filter_components() -> dict[str, Json]:
    ordered = {"type": ["number", "string"], "format": "date-time"}
    operand: dict[str, Json] = {
        "eq": {},
        "ne": {},
        "in": {"type": "array"},
        "nin": {"type": "array"},
        "gt": ordered,
        "gte": ordered,
        "lt": ordered,
        "lte": ordered,
        "exists": {"type": "boolean"},
        "contains": {},
    }
    operators = [
        {
            "type": "object",
            "properties": {op: operand.get(op, {})},
            "required": [op],
            "additionalProperties": False,
        }
        for op in OPERATORS
    ]
    return {
        "Filter": {
            "type": "object",
            "description": "Conditions on metadata, all of which must hold. A key is a metadata "
            "key (a dotted key a.b reaches into nested objects); its value is a JSON value that "
            "the metadata value must equal, or an object with exactly one operator. gt, gte, lt "
            "and lte compare numbers with numbers and strings as ISO 8601 timestamps with a zone.",
            "propertyNames": {"pattern": r"^[^.]+(\.[^.]+)*$"},
            "additionalProperties": ref("FilterCondition"),
        },
        "FilterCondition": {
            "anyOf": [
                {
                    "type": ["string", "number", "boolean", "null", "array"],
                    "description": 'Equality (typed: 1, "1" and true differ).',
                },
                *operators,
            ]
        },
    }


def field_schema(field: fields.Field) -> Json:
    """The JSON Schema of one marshmallow field, with this app's limits."""
    out = _field_type(field)
    for validator in field.validators:
        if isinstance(validator, validate.Range):
            if validator.min is not None:
                key = "minimum" if validator.min_inclusive else "exclusiveMinimum"
                out[key] = validator.min
            if validator.max is not None:
                key = "maximum" if validator.max_inclusive else "exclusiveMaximum"
                out[key] = validator.max
        elif isinstance(validator, validate.Length):
            prefix = "Items" if out.get("type") == "array" else "Length"
            if validator.min is not None:
                out[f"min{prefix}"] = validator.min
            if validator.max is not None:
                out[f"max{prefix}"] = validator.max
            if validator.equal is not None:
                out[f"min{prefix}"] = out[f"max{prefix}"] = validator.equal
        elif isinstance(validator, validate.OneOf):
            out["enum"] = list(validator.choices)
    description = field.metadata.get("description")
    if description:
        out["description"] = description
    default = field.load_default
    if callable(default):
        default = default()
    if default is not missing and default is not None:
        out["default"] = default
    if field.allow_none:
        if "$ref" in out:
            out = {"anyOf": [out, {"type": "null"}]}
        else:
            kind = out.get("type", [])
            out["type"] = [*([kind] if isinstance(kind, str) else kind), "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
    return out


def _field_type(field: fields.Field) -> Json:
    config = current_app.config
    if isinstance(field, schemas.Text):
        return {
            "type": "string",
            "minLength": 1,
            "maxLength": config[field.max_setting],
            # At least one character that is not a space, and no NUL.
            "pattern": r"^[^\u0000]*[^\s\u0000][^\u0000]*$",
        }
    if isinstance(field, schemas.Uuid):
        return {
            "type": "string",
            "format": "uuid",
            "pattern": r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$",
        }
    if isinstance(field, schemas.Metadata):
        return {
            "type": "object",
            "additionalProperties": True,
            "description": f"Any JSON object, up to {config['MAX_METADATA_BYTES']} bytes as "
            f"compact JSON and {config['MAX_METADATA_DEPTH']} levels deep.",
        }
    if isinstance(field, schemas.Timestamp):
        rule = "in the future; " if field.future else ""
        return {
            "type": "string",
            "format": "date-time",
            "description": f"ISO 8601 with its zone (Z or an offset such as +02:00), {rule}"
            "e.g. 2026-11-23T10:00:00Z.",
        }
    if isinstance(field, schemas.FilterField):
        return ref("Filter")
    if isinstance(field, schemas.Flag | fields.Boolean):
        return {"type": "boolean"}
    if isinstance(field, fields.Integer):
        return {"type": "integer"}
    if isinstance(field, fields.Number):
        return {"type": "number"}
    if isinstance(field, fields.String):
        return {"type": "string"}
    if isinstance(field, fields.List):
        return _array(field_schema(field.inner))
    if isinstance(field, fields.Nested) and isinstance(field.schema, Schema):
        return input_schema(field.schema)
    # Any JSON value: nothing more is known of a field of a new kind.
    return {}


def input_schema(schema: Schema) -> Json:
    """The JSON Schema of an input object validated by ``schema``."""
    properties: Json = {}
    required = []
    for name, field in schema.load_fields.items():
        key = field.data_key or name
        properties[key] = field_schema(field)
        if field.required:
            required.append(key)
    out: Json = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    # A rule on the whole object lives in code, not in its fields: in words.
    rule = getattr(schema, "object_rule", None)
    if rule:
        out["description"] = rule
    return out


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
    result = {
        "type": "object",
        "properties": {
            "result": {
                "type": "object",
                "properties": {"data": proc.output.schema},
                "required": ["data"],
                "additionalProperties": False,
            }
        },
        "required": ["result"],
        "additionalProperties": False,
    }
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
            op["requestBody"] = {"required": True, "content": {JSON: body}}
        else:
            op["parameters"] = [
                {
                    "name": "input",
                    "in": "query",
                    "required": True,
                    "description": "The input object as JSON, URL-encoded.",
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

Limits and defaults shown are this server's settings.
"""


def document(app: Flask) -> Json:
    """The OpenAPI 3.1 document of ``app``'s procedures, with its settings' limits."""
    registry: dict[str, Procedure] = app.extensions["trpc"]
    routers: list[Router] = app.extensions["trpc_routers"]
    components: dict[str, Json] = {**_error_components(), **_filter_components()}
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
                _add(components, input_name, input_schema(proc.input))
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
                }
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

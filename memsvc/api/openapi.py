"""``GET /openapi.json``: an OpenAPI 3.1 document of every procedure, as the HTTP call it is.

The document is built from the procedure registry (``app.extensions["trpc"]``)
and the very marshmallow schemas that validate requests, with the size
limits of this server's settings, so it cannot drift from what the server
accepts: a new procedure or input field appears in it by itself. A query is
``GET /trpc/<procedure>`` with its input as URL-encoded JSON in the ``input``
parameter; a mutation is ``POST /trpc/<procedure>`` with a JSON body. What
each procedure answers is described here by hand, once per output shape
(:data:`OUTPUT_SCHEMAS`), and checked against live answers by the tests.
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
from . import middleware
from . import schemas
from .trpc import MUTATION
from .trpc import Procedure
from .trpc import json_response

bp = Blueprint("openapi", __name__)

JSON = "application/json"
Json = dict[str, t.Any]


def ref(name: str) -> Json:
    """A reference to a schema of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def _array(items: Json) -> Json:
    return {"type": "array", "items": items}


_KEY_BASE = {
    "id": {**wire.UUID, "description": "The key record's id, which keys.revoke takes."},
    "idpUserId": {"type": "string", "description": "The tenant."},
    "idpKeyId": {"type": "string", "pattern": "^key_[0-9a-f]{16}$"},
    "name": {"type": "string"},
}


def output_components() -> dict[str, Json]:
    """JSON Schemas of what procedures answer, by component name."""
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
        "Memory": wire.MEMORY.schema(),
        "SearchResult": wire.object_schema(
            {
                **wire.MEMORY.properties(),
                "similarity": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "Cosine similarity of the query and the memory, clamped "
                    "into [0, 1].",
                },
                "matchedBy": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["keyword", "semantic"]},
                    "description": "Which searches found it (keyword and hybrid modes).",
                },
                "explain": wire.object_schema(
                    {
                        "cosine": {
                            "type": "number",
                            "minimum": 0,
                            "maximum": 1,
                            "description": "The cosine similarity (equal to similarity).",
                        },
                        "keyword": {
                            "type": ["number", "null"],
                            "minimum": 0,
                            "maximum": 1,
                            "description": "The keyword match's strength in [0, 1]: the "
                            "share of the query's words, each weighted by its rarity among "
                            "the user's own memories, that the memory holds; null when no "
                            "query word matched (and in semantic mode).",
                        },
                        "score": {
                            "type": "number",
                            "description": "What the mode ranked by: the cosine (semantic), "
                            "the BM25 score (keyword), the cosine plus 0.5 x the keyword "
                            "strength squared (hybrid).",
                        },
                    },
                    ["cosine", "keyword", "score"],
                    description="Why it ranked where it did; only with explain: true.",
                ),
            },
            (*wire.MEMORY.required(), "similarity"),
        ),
        "MemoryVersion": wire.VERSION.schema(),
        "ApiKey": wire.object_schema(
            {
                **_KEY_BASE,
                "lastUsedAt": {**wire.TIMESTAMP, "type": ["string", "null"]},
                "createdAt": wire.TIMESTAMP,
                "revokedAt": {**wire.TIMESTAMP, "type": ["string", "null"]},
            },
            ["id", "idpUserId", "idpKeyId", "name", "lastUsedAt", "createdAt", "revokedAt"],
        ),
        "CreatedKey": wire.object_schema(
            {
                **_KEY_BASE,
                "secret": {
                    "type": "string",
                    "pattern": "^sk_[a-z0-9]+_[0-9a-f]{64}$",
                    "description": "Shown in this answer only, never again.",
                },
                "createdAt": wire.TIMESTAMP,
            },
            ["id", "idpUserId", "idpKeyId", "name", "secret", "createdAt"],
        ),
        "Success": wire.object_schema({"success": {"type": "boolean", "const": True}}, ["success"]),
        "DeleteAllResult": wire.object_schema(
            {
                "success": {"type": "boolean", "const": True},
                "deleted": {"type": "integer", "minimum": 0},
            },
            ["success", "deleted"],
        ),
        "ServiceInfo": wire.object_schema(
            {
                "version": {"type": "string"},
                "embedder": wire.object_schema(
                    {
                        "model": {"type": "string"},
                        "dimensions": {"type": "integer", "minimum": 1},
                        "maxTokens": {"type": ["integer", "null"]},
                        "recommendedThreshold": {
                            "type": ["number", "null"],
                            "minimum": 0,
                            "maximum": 1,
                        },
                    },
                    ["model", "dimensions", "maxTokens", "recommendedThreshold"],
                ),
                "defaults": wire.object_schema(
                    {
                        "threshold": {"type": "number", "minimum": 0, "maximum": 1},
                        "limit": {"type": "integer", "minimum": 1},
                    },
                    ["threshold", "limit"],
                ),
                "limits": wire.object_schema(
                    {
                        "perMinute": {"type": "integer", "minimum": 0, "description": "0: none."},
                        "concurrent": {"type": "integer", "minimum": 0, "description": "0: none."},
                    },
                    ["perMinute", "concurrent"],
                    description="The calling key's limits, its own overrides included.",
                ),
            },
            ["version", "embedder", "defaults", "limits"],
        ),
        "Health": wire.object_schema(
            {
                "status": {"type": "string", "enum": ["ok", "error"]},
                "db": {"type": "string", "enum": ["connected", "disconnected"]},
                "timestamp": {"type": "integer", "description": "Epoch milliseconds."},
            },
            ["status", "db", "timestamp"],
        ),
    }


#: What each output function of :mod:`.schemas` sends.
OUTPUT_SCHEMAS: dict[t.Callable[[t.Any], t.Any], Json] = {
    schemas.memory_out: ref("Memory"),
    schemas.memories_out: _array(ref("Memory")),
    schemas.search_results_out: _array(ref("SearchResult")),
    schemas.versions_out: _array(ref("MemoryVersion")),
    schemas.keys_out: _array(ref("ApiKey")),
    schemas.created_key_out: ref("CreatedKey"),
}

#: What the procedures whose handlers answer plain values send.
OUTPUT_BY_PATH: dict[str, Json] = {
    "memory.delete": ref("Success"),
    "memory.deleteAll": ref("DeleteAllResult"),
    "keys.revoke": ref("Success"),
    "service.info": ref("ServiceInfo"),
}


def output_schema(proc: Procedure) -> Json | None:
    """The JSON Schema of what ``proc`` answers, or None where nobody has described it."""
    if proc.output is not None:
        return OUTPUT_SCHEMAS.get(proc.output)
    return OUTPUT_BY_PATH.get(proc.path)


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
    rule = _schema_rule(schema)
    if rule:
        out["description"] = rule
    return out


def _schema_rule(schema: Schema) -> str | None:
    # Whole-object rules live in code, not in fields; name the one there is.
    if isinstance(schema, schemas.UpdateInput):
        return "Give at least one of content, metadata, expiresAt."
    return None


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


def _statuses(proc: Procedure) -> list[int]:
    """The error statuses a call of ``proc`` can answer."""
    statuses = [400, 401]
    fields_ = proc.input.load_fields if proc.input is not None else {}
    # Creating a key past the tenant's cap of active keys.
    if proc.path == "keys.create":
        statuses.append(403)
    # A procedure that names a record by id can find none.
    if "id" in fields_:
        statuses.append(404)
    # A request body over the limit; any answer past the request's budget.
    statuses.append(413)
    if proc.type == MUTATION:
        statuses.append(415)
    if middleware.limited in proc.middleware or middleware.tenant_limited in proc.middleware:
        statuses.append(429)
    # Unexpected failures; storage that cannot take the call, or (for text
    # that is embedded) a provider too slow to wait for.
    statuses += [500, 503]
    return statuses


def _security(proc: Procedure) -> list[Json]:
    if middleware.api_key in proc.middleware:
        return [{"apiKey": []}]
    if middleware.bearer_token in proc.middleware:
        return [{"bearer": []}]
    return []


def _operation(proc: Procedure, input_name: str | None) -> Json:
    router, _, name = proc.path.partition(".")
    output = output_schema(proc)
    result = {
        "type": "object",
        "properties": {
            "result": {
                "type": "object",
                "properties": {"data": output if output is not None else {}},
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
        "security": _security(proc),
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
            for status in _statuses(proc)
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
    components: dict[str, Json] = {**output_components(), **_filter_components()}
    paths: Json = {}
    with app.app_context():
        for path in sorted(registry):
            proc = registry[path]
            input_name = None
            if proc.input is not None:
                input_name = type(proc.input).__name__
                built = input_schema(proc.input)
                if components.setdefault(input_name, built) != built:
                    raise ValueError(f"two input schemas are named {input_name}")
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
                "200": {"description": "Up.", "content": {JSON: {"schema": ref("Health")}}},
                "503": {
                    "description": "The database cannot be read.",
                    "content": {JSON: {"schema": ref("Health")}},
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
            {"name": "memory", "description": "A tenant's memories, per end user (API key)."},
            {"name": "keys", "description": "A tenant's API keys (identity-provider JWT)."},
            {"name": "service", "description": "What a client needs to know (API key)."},
            {"name": "health", "description": "No credentials."},
        ],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "responses": _error_responses(),
            "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            },
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

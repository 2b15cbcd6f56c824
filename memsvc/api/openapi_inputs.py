"""The JSON Schema of each procedure's input, from the marshmallow schema that validates it.

Types, limits (this server's settings, read from the app's config),
defaults and nullability come from the fields and their validators, so a
new input field appears in the OpenAPI document by itself.
"""

from __future__ import annotations

import typing as t

from flask import current_app
from marshmallow import Schema
from marshmallow import fields
from marshmallow import missing
from marshmallow import validate

from ..search.filters import OPERATORS
from . import inputs

Json = dict[str, t.Any]


def ref(name: str) -> Json:
    """A reference to a schema of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def filter_components() -> dict[str, Json]:
    """The metadata filter's grammar (:mod:`memsvc.search.filters`), as JSON Schema."""
    ordered = {"type": ["number", "string"], "format": "date-time"}
    operand: dict[str, Json] = {
        "eq": {},
        "ne": {},
        "in": {"type": "array", "items": {}},
        "nin": {"type": "array", "items": {}},
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
                    "items": {},
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
    if isinstance(field, inputs.Text):
        return {
            "type": "string",
            "minLength": 1,
            "maxLength": config[field.max_setting],
            # At least one character that is not a space, and no NUL.
            "pattern": r"^[^\u0000]*[^\s\u0000][^\u0000]*$",
        }
    if isinstance(field, inputs.Uuid):
        return {
            "type": "string",
            "format": "uuid",
            "pattern": r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$",
        }
    if isinstance(field, inputs.Metadata):
        return {
            "type": "object",
            "additionalProperties": True,
            "description": f"Any JSON object, up to {config['MAX_METADATA_BYTES']} bytes as "
            f"compact JSON and {config['MAX_METADATA_DEPTH']} levels deep.",
        }
    if isinstance(field, inputs.Timestamp):
        rule = "in the future; " if field.future else ""
        return {
            "type": "string",
            "format": "date-time",
            "description": f"ISO 8601 with its zone (Z or an offset such as +02:00), {rule}"
            "e.g. 2026-11-23T10:00:00Z.",
        }
    if isinstance(field, inputs.Moment):
        return {
            "type": "string",
            "format": "date-time",
            "description": "ISO 8601 with its zone (Z or an offset such as +02:00), e.g. "
            "2023-05-08T19:30:00+02:00; the offset is kept for its dates.",
        }
    if isinstance(field, inputs.Kinds):
        return {
            "type": "array",
            "items": {"type": "string", "enum": list(inputs.KINDS)},
            "minItems": 1,
            "maxItems": len(inputs.KINDS),
        }
    if isinstance(field, inputs.Messages):
        return {
            "type": "array",
            "items": input_schema(inputs.MessageInput()),
            "minItems": 1,
            "maxItems": config[field.max_setting],
        }
    if isinstance(field, inputs.FilterField):
        return ref("Filter")
    if isinstance(field, inputs.Flag | fields.Boolean):
        return {"type": "boolean"}
    if isinstance(field, fields.Integer):
        return {"type": "integer"}
    if isinstance(field, fields.Number):
        return {"type": "number"}
    if isinstance(field, fields.String):
        return {"type": "string"}
    if isinstance(field, fields.List):
        return {"type": "array", "items": field_schema(field.inner)}
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

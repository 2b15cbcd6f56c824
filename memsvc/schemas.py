"""Input and output schemas of every procedure.

Inputs follow what tRPC's validators do: unknown keys are dropped, wrong
types are errors (a number is never read from a string), and an error
names the field and the rule. Size limits are operator settings, read from
the app's config when a value is checked.
"""

from __future__ import annotations

import json
import re
import typing as t

from flask import current_app
from marshmallow import EXCLUDE
from marshmallow import Schema
from marshmallow import ValidationError
from marshmallow import fields
from marshmallow import validate

from . import clock

_UUID = re.compile(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")

_MESSAGES = {
    "required": "is required",
    "null": "must not be null",
}


def _limit(name: str) -> int:
    return current_app.config[name]


def _check_unicode(value: str) -> None:
    # JSON can carry lone UTF-16 surrogates ("\ud800"), which are not text
    # and cannot be stored or sent back as UTF-8.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("must be valid Unicode text (it has a lone surrogate)") from None


class Text(fields.String):
    """A string with at least one non-space character, within a size setting."""

    def __init__(self, max_setting: str, **kwargs: t.Any):
        super().__init__(error_messages={**_MESSAGES, "invalid": "must be a string"}, **kwargs)
        self.max_setting = max_setting

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        if not text.strip():
            raise ValidationError("must not be empty")
        limit = _limit(self.max_setting)
        if len(text) > limit:
            raise ValidationError(f"must be at most {limit} characters long")
        if "\x00" in text:
            raise ValidationError("must not contain NUL characters")
        _check_unicode(text)
        return text


class Uuid(fields.String):
    """A UUID in its usual 8-4-4-4-12 form, returned lower-case."""

    def __init__(self, **kwargs: t.Any):
        super().__init__(error_messages={**_MESSAGES, "invalid": "must be a string"}, **kwargs)

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        if not _UUID.match(text):
            raise ValidationError("must be a UUID")
        return text.lower()


class WholeNumber(fields.Integer):
    """An integer; ``10.0`` counts (JSON does not tell them apart), ``true`` and ``"10"`` do not."""

    def __init__(self, **kwargs: t.Any):
        super().__init__(
            strict=True, error_messages={**_MESSAGES, "invalid": "must be an integer"}, **kwargs
        )

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return super()._deserialize(value, attr, data, **kwargs)


class Number(fields.Float):
    """A finite JSON number; booleans and numeric strings are refused."""

    def __init__(self, **kwargs: t.Any):
        super().__init__(
            allow_nan=False, error_messages={**_MESSAGES, "invalid": "must be a number"}, **kwargs
        )

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class Metadata(fields.Field):
    """A JSON object, bounded in size and depth, kept exactly as given."""

    def __init__(self, **kwargs: t.Any):
        super().__init__(error_messages={**_MESSAGES}, **kwargs)

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> dict:
        if not isinstance(value, dict):
            raise ValidationError("must be a JSON object")
        _check_tree(value, _limit("MAX_METADATA_DEPTH"))
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
        limit = _limit("MAX_METADATA_BYTES")
        if size > limit:
            raise ValidationError(f"must be at most {limit} bytes as JSON (it is {size})")
        return value


def _check_tree(value: t.Any, max_depth: int) -> None:
    """Check nesting depth and text in a JSON value without recursing."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_unicode(node)
            continue
        if not isinstance(node, (dict, list)):
            continue
        if depth > max_depth:
            raise ValidationError(f"must not be nested more than {max_depth} levels deep")
        if isinstance(node, dict):
            for key, item in node.items():
                _check_unicode(key)
                stack.append((item, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in node)


class Input(Schema):
    class Meta:
        unknown = EXCLUDE


# -- memory router -----------------------------------------------------------


class AddMemoryInput(Input):
    userId = Text("MAX_USER_ID_CHARS", required=True)
    content = Text("MAX_CONTENT_CHARS", required=True)
    metadata = Metadata(load_default=dict)


class SearchInput(Input):
    userId = Text("MAX_USER_ID_CHARS", required=True)
    query = Text("MAX_CONTENT_CHARS", required=True)
    limit = WholeNumber(
        load_default=10, validate=validate.Range(1, 100, error="must be between 1 and 100")
    )
    threshold = Number(
        load_default=0.7, validate=validate.Range(0, 1, error="must be between 0 and 1")
    )


class GetAllInput(Input):
    userId = Text("MAX_USER_ID_CHARS", required=True)
    limit = WholeNumber(
        load_default=100, validate=validate.Range(1, 1000, error="must be between 1 and 1000")
    )


class IdInput(Input):
    id = Uuid(required=True)


# -- keys router -------------------------------------------------------------


class CreateKeyInput(Input):
    name = Text("MAX_NAME_CHARS", required=True)


# -- outputs -----------------------------------------------------------------


class Timestamp(fields.Field):
    """Epoch milliseconds shown as ISO 8601 (UTC, milliseconds, ``Z``)."""

    def _serialize(self, value: t.Any, attr: t.Any, obj: t.Any, **kwargs: t.Any) -> str | None:
        return None if value is None else clock.iso(value)


class MemoryOutput(Schema):
    id = fields.String()
    content = fields.String()
    userId = fields.String(attribute="user_id")
    idpUserId = fields.String(attribute="tenant")
    metadata = fields.Raw()
    createdAt = Timestamp(attribute="created_at")
    updatedAt = Timestamp(attribute="updated_at")


class SearchResultOutput(MemoryOutput):
    similarity = fields.Method("_similarity")

    def get_attribute(self, obj: t.Any, attr: str, default: t.Any) -> t.Any:
        # A ScoredMemory: the similarity is its own, the rest its memory's.
        if attr == "similarity":
            return obj.similarity
        return super().get_attribute(obj.memory, attr, default)

    def _similarity(self, obj: t.Any) -> float | int:
        # JSON.stringify writes 1, not 1.0; match it for whole numbers.
        return int(obj.similarity) if obj.similarity.is_integer() else obj.similarity


class KeyOutput(Schema):
    id = fields.String()
    idpUserId = fields.String(attribute="tenant")
    idpKeyId = fields.String(attribute="key_id")
    name = fields.String()
    lastUsedAt = Timestamp(attribute="last_used_at")
    createdAt = Timestamp(attribute="created_at")
    revokedAt = Timestamp(attribute="revoked_at")


class CreatedKeyOutput(Schema):
    id = fields.String(attribute="key.id")
    idpUserId = fields.String(attribute="key.tenant")
    idpKeyId = fields.String(attribute="key.key_id")
    name = fields.String(attribute="key.name")
    secret = fields.String()
    createdAt = Timestamp(attribute="key.created_at")


def error_text(messages: t.Any, prefix: str = "") -> list[str]:
    """Flatten marshmallow's nested messages into ``field: rule`` lines."""
    if isinstance(messages, dict):
        out = []
        for key, value in messages.items():
            name = prefix if key == "_schema" else (f"{prefix}.{key}" if prefix else str(key))
            out.extend(error_text(value, name))
        return out
    if isinstance(messages, list):
        out = []
        for item in messages:
            out.extend(error_text(item, prefix))
        return out
    return [f"{prefix}: {messages}" if prefix else str(messages)]

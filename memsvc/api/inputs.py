"""Input schemas (marshmallow) of every procedure.

Inputs follow what tRPC's validators do: unknown keys are dropped, wrong
types are errors (a number is never read from a string), and an error
names the field and the rule. Size limits are operator settings, read from
the app's config when a value is checked and passed to the rules of
:mod:`memsvc.rules`, which ``memsvc import`` applies too.
"""

from __future__ import annotations

import typing as t

from flask import current_app
from marshmallow import EXCLUDE
from marshmallow import Schema
from marshmallow import ValidationError
from marshmallow import fields
from marshmallow import validate
from marshmallow import validates_schema

from .. import rules
from ..limits import MAX_CONCURRENT
from ..limits import MAX_PER_MINUTE
from ..models import JOB_STATUSES
from ..search import MODES
from ..search import filters
from ..search.filters import Filter
from ..text import InvalidText
from ..text import check_text
from ..text import check_unicode

_MESSAGES = {
    "required": "is required",
    "null": "must not be null",
}


def _limit(name: str) -> int:
    return current_app.config[name]


_T = t.TypeVar("_T")


def _apply(rule: t.Callable[..., _T], *args: t.Any, **kwargs: t.Any) -> _T:
    """A rule of :mod:`memsvc.rules`, its refusal as marshmallow's."""
    try:
        return rule(*args, **kwargs)
    except rules.Invalid as e:
        raise ValidationError(str(e)) from None


class Text(fields.String):
    """A string with at least one non-space character, within a size setting."""

    def __init__(self, max_setting: str, *, printable: bool = False, **kwargs: t.Any):
        super().__init__(error_messages={**_MESSAGES, "invalid": "must be a string"}, **kwargs)
        self.max_setting = max_setting
        self.printable = printable

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        try:
            check_text(text, _limit(self.max_setting), printable=self.printable)
        except InvalidText as e:
            raise ValidationError(str(e)) from None
        return text


class Part(fields.String):
    """A string that need not be a whole value (a prefix, a position): may be empty, within a
    size setting, no NUL, valid Unicode."""

    def __init__(self, max_setting: str, **kwargs: t.Any):
        super().__init__(error_messages={**_MESSAGES, "invalid": "must be a string"}, **kwargs)
        self.max_setting = max_setting

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        limit = _limit(self.max_setting)
        if len(text) > limit:
            raise ValidationError(f"must be at most {limit} characters long")
        if "\x00" in text:
            raise ValidationError("must not contain NUL characters")
        try:
            check_unicode(text)
        except InvalidText as e:
            raise ValidationError(str(e)) from None
        return text


class Uuid(fields.String):
    """A UUID in its usual 8-4-4-4-12 form, returned lower-case."""

    def __init__(self, **kwargs: t.Any):
        super().__init__(error_messages={**_MESSAGES, "invalid": "must be a string"}, **kwargs)

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        return _apply(rules.uuid, text)


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
        depth, size = _limit("MAX_METADATA_DEPTH"), _limit("MAX_METADATA_BYTES")
        return _apply(rules.metadata, value, depth, size)


class Flag(fields.Field):
    """A JSON boolean: ``true`` or ``false``, nothing that merely looks like one."""

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> bool:
        if not isinstance(value, bool):
            raise ValidationError("must be true or false")
        return value


class Timestamp(fields.Field):
    """An ISO 8601 timestamp with its zone (``Z`` or ``+02:00``), as epoch milliseconds."""

    def __init__(self, *, future: bool = False, **kwargs: t.Any):
        super().__init__(error_messages={**_MESSAGES}, **kwargs)
        self.future = future

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> int:
        return _apply(rules.timestamp, value, future=self.future)


class Moment(fields.Field):
    """An ISO 8601 time with its zone, kept with the offset it was written in (:class:`~memsvc.
    models.Moment`): "yesterday" in a message means the day before its own date."""

    def __init__(self, **kwargs: t.Any):
        super().__init__(error_messages={**_MESSAGES}, **kwargs)

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> t.Any:
        return _apply(rules.moment, value)


class FilterField(fields.Field):
    """A metadata filter (:mod:`memsvc.search.filters`), parsed and checked."""

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> Filter:
        try:
            return filters.parse(value, max_depth=_limit("MAX_METADATA_DEPTH"))
        except filters.InvalidFilter as e:
            raise ValidationError(e.messages) from None


class Input(Schema):
    #: A rule on the object as a whole, in words, for the OpenAPI document.
    object_rule: t.ClassVar[str | None] = None
    #: Whether the input may be left out (JavaScript's ``undefined``), and is
    #: then read as ``{}``; anything given must still be an object.
    optional: t.ClassVar[bool] = False

    class Meta:
        unknown = EXCLUDE


class NoInput(Input):
    """The input of a procedure that takes none: left out, or an object (its fields ignored).

    A number, an array, a string or null is refused as for every other
    procedure.
    """

    object_rule = "No input: leave it out, or give an object (its fields are ignored)."
    optional = True


_LIMIT_100 = validate.Range(1, 100, error="must be between 1 and 100")
_LIMIT_1000 = validate.Range(1, 1000, error="must be between 1 and 1000")
_FRACTION = validate.Range(0, 1, error="must be between 0 and 1")


# -- memory router -----------------------------------------------------------


_OCCURRED_AT = (
    "When it was said or happened, if not when it is stored (past or future: backfill); "
    "its time for occurredAfter/occurredBefore, asOf and time-aware ranking."
)


class AddMemoryInput(Input):
    userId = Text("MAX_USER_ID_CHARS", required=True)
    content = Text("MAX_CONTENT_CHARS", required=True)
    metadata = Metadata(load_default=dict)
    expiresAt = Timestamp(future=True, load_default=None)
    dedupe = Flag(load_default=False)
    occurredAt = Moment(load_default=None, metadata={"description": _OCCURRED_AT})


KINDS = ("memory", "message", "fact")


class Kinds(fields.List):
    """A non-empty array of memory kinds, each once at most."""

    def __init__(self, **kwargs: t.Any):
        super().__init__(
            fields.String(
                validate=validate.OneOf(KINDS, error="must be one of memory, message, fact"),
                error_messages={**_MESSAGES, "invalid": "must be a string"},
            ),
            validate=validate.Length(min=1, error="must hold at least one kind"),
            error_messages={**_MESSAGES, "invalid": "must be an array"},
            **kwargs,
        )

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> t.Any:
        if isinstance(value, list) and len(value) > len(KINDS):
            raise ValidationError(f"must hold at most {len(KINDS)} kinds")
        return frozenset(super()._deserialize(value, attr, data, **kwargs))


class _Scoped(Input):
    """What search and listing share: the user, and which of their memories qualify."""

    userId = Text("MAX_USER_ID_CHARS", required=True)
    filter = FilterField(load_default=None)
    createdAfter = Timestamp(load_default=None)
    createdBefore = Timestamp(load_default=None)
    kinds = Kinds(
        load_default=None,
        metadata={
            "description": 'Only memories of these kinds: "memory" (added with memory.add), '
            '"message" (memory.ingest), "fact" (extraction). Default: all.'
        },
    )
    occurredAfter = Timestamp(
        load_default=None,
        metadata={
            "description": "Only memories whose time (occurredAt, else createdAt) is after it."
        },
    )
    occurredBefore = Timestamp(
        load_default=None,
        metadata={
            "description": "Only memories whose time (occurredAt, else createdAt) is before it."
        },
    )
    asOf = Timestamp(
        load_default=None,
        metadata={
            "description": "Answer as of this time: memories whose time is at or before it, "
            "facts current then (validTo unset or after it)."
        },
    )
    includeSuperseded = Flag(
        load_default=False,
        metadata={"description": "Also facts that newer facts replaced (supersededBy set)."},
    )


class SearchInput(_Scoped):
    query = Text("MAX_CONTENT_CHARS", required=True)
    mode = fields.String(
        load_default="semantic",
        validate=validate.OneOf(MODES, error="must be one of semantic, keyword, hybrid"),
        error_messages={**_MESSAGES, "invalid": "must be a string"},
    )
    limit = WholeNumber(load_default=10, validate=_LIMIT_100)
    threshold = Number(
        load_default=None,
        allow_none=False,
        validate=_FRACTION,
        metadata={
            "description": "A floor on each result's cosine similarity, in every mode. "
            "Omitted: the server's default threshold in semantic and hybrid mode "
            "(service.info's defaults.threshold), no floor in keyword mode."
        },
    )
    explain = Flag(
        load_default=False,
        metadata={"description": "Also answer, per result, why it ranked where it did."},
    )
    time = fields.String(
        load_default=None,
        validate=validate.OneOf(("on", "off"), error="must be one of on, off"),
        error_messages={**_MESSAGES, "invalid": "must be a string"},
        metadata={
            "description": 'Rank memories inside the time the query names ("last week", '
            '"in May 2023") higher: on by default in hybrid mode, off in the others.'
        },
    )
    now = Moment(
        load_default=None,
        metadata={
            "description": "The time the query's time expressions are resolved against "
            '(ISO, with its zone: "yesterday" is the day before its own date). Default: '
            "the time of the call, in UTC."
        },
    )
    context = WholeNumber(
        load_default=0,
        validate=validate.Range(0, 10, error="must be between 0 and 10"),
        metadata={
            "description": "Each result that is a message also carries up to this many "
            "messages of its session on either side (context.before, context.after)."
        },
    )


class GetAllInput(_Scoped):
    limit = WholeNumber(load_default=100, validate=_LIMIT_1000)
    cursor = Uuid(load_default=None)


class IdInput(Input):
    id = Uuid(required=True)


class MemoryIdInput(IdInput):
    #: Optional: the memory must also belong to this end user (else 404), so
    #: a client acting for one user cannot reach another's by id.
    userId = Text("MAX_USER_ID_CHARS", load_default=None)


class UpdateInput(Input):
    id = Uuid(required=True)
    userId = Text("MAX_USER_ID_CHARS", load_default=None)
    content = Text("MAX_CONTENT_CHARS")
    metadata = Metadata(allow_none=True)
    expiresAt = Timestamp(future=True, allow_none=True)
    occurredAt = Moment(
        allow_none=True, metadata={"description": _OCCURRED_AT + " null: its createdAt again."}
    )

    object_rule = "Give at least one of content, metadata, expiresAt, occurredAt."

    @validates_schema
    def _something_to_change(self, data: dict[str, t.Any], **kwargs: t.Any) -> None:
        if not {"content", "metadata", "expiresAt", "occurredAt"} & data.keys():
            raise ValidationError("give at least one of content, metadata, expiresAt, occurredAt")


ROLES = ("user", "assistant", "system", "tool")


class MessageInput(Input):
    error_messages = {"type": "must be an object"}

    role = fields.String(
        required=True,
        validate=validate.OneOf(ROLES, error="must be one of user, assistant, system, tool"),
        error_messages={**_MESSAGES, "invalid": "must be a string"},
    )
    content = Text("MAX_CONTENT_CHARS", required=True)
    name = Text(
        "MAX_NAME_CHARS",
        load_default=None,
        metadata={"description": "Who said it; answered as the message's speaker."},
    )
    at = Moment(
        load_default=None,
        metadata={
            "description": "When it was said. Default: the previous message's time; the "
            "first message's, the time of the call."
        },
    )
    id = Text(
        "MAX_NAME_CHARS",
        load_default=None,
        metadata={
            "description": "Your id of the message: a message whose id its session already "
            "holds is not stored again."
        },
    )


class Messages(fields.List):
    """The messages of an ingest: at least one, at most the operator's ``MAX_INGEST_MESSAGES``."""

    max_setting = "MAX_INGEST_MESSAGES"

    def __init__(self, **kwargs: t.Any):
        super().__init__(
            fields.Nested(MessageInput()),
            error_messages={**_MESSAGES, "invalid": "must be an array"},
            **kwargs,
        )

    def _deserialize(self, value: t.Any, attr: t.Any, data: t.Any, **kwargs: t.Any) -> t.Any:
        # Counted before any message is validated: a huge array costs nothing.
        if isinstance(value, list):
            limit = _limit(self.max_setting)
            if not value:
                raise ValidationError("must hold at least one message")
            if len(value) > limit:
                raise ValidationError(
                    f"must hold at most {limit} messages (MEMSVC_MAX_INGEST_MESSAGES); "
                    "send a long conversation in several calls with the same sessionId"
                )
        return super()._deserialize(value, attr, data, **kwargs)


class IngestInput(Input):
    userId = Text("MAX_USER_ID_CHARS", required=True)
    sessionId = Text(
        "MAX_USER_ID_CHARS",
        load_default=None,
        metadata={
            "description": "The conversation to add to; a later call with the same id goes on "
            "where it stopped. Default: a new session."
        },
    )
    messages = Messages(required=True)
    metadata = Metadata(
        load_default=dict, metadata={"description": "Given to every message of the call."}
    )
    extract = Flag(
        load_default=None,
        metadata={
            "description": "Also draw facts from the messages with the operator's language "
            "model. Default: the server's setting (MEMSVC_EXTRACT)."
        },
    )


class JobsInput(Input):
    userId = Text(
        "MAX_USER_ID_CHARS",
        load_default=None,
        metadata={"description": "Only this end user's jobs."},
    )
    status = fields.String(
        load_default=None,
        validate=validate.OneOf(JOB_STATUSES, error="must be one of queued, running, done, failed"),
        metadata={"description": "Only jobs of this status."},
    )
    limit = WholeNumber(load_default=100, validate=_LIMIT_1000)
    cursor = Uuid(
        load_default=None, metadata={"description": "The last job id of the previous page."}
    )


class SessionsInput(Input):
    userId = Text("MAX_USER_ID_CHARS", required=True)
    limit = WholeNumber(load_default=100, validate=_LIMIT_1000)
    cursor = Text(
        "MAX_USER_ID_CHARS",
        load_default=None,
        metadata={"description": "The last sessionId of the previous page."},
    )


class SessionInput(Input):
    userId = Text("MAX_USER_ID_CHARS", required=True)
    sessionId = Text("MAX_USER_ID_CHARS", required=True)
    limit = WholeNumber(load_default=100, validate=_LIMIT_1000)
    after = WholeNumber(
        load_default=None,
        validate=validate.Range(0, error="must be 0 or more"),
        metadata={"description": "A position: the page starts after it."},
    )


class UserInput(Input):
    userId = Text("MAX_USER_ID_CHARS", required=True)


class UsersInput(Input):
    optional = True

    limit = WholeNumber(load_default=100, validate=_LIMIT_1000)
    cursor = Part(
        "MAX_USER_ID_CHARS",
        load_default=None,
        metadata={
            "description": "The last userId of the previous page; the page starts after it "
            "(it need not still be a user)."
        },
    )
    prefix = Part(
        "MAX_USER_ID_CHARS",
        load_default="",
        metadata={"description": "Only end users whose userId starts with it."},
    )


# -- keys router -------------------------------------------------------------


class SetKeyLimitsInput(IdInput):
    # Absent: unchanged; null: back to the server's setting.
    rateLimit = WholeNumber(
        allow_none=True,
        validate=validate.Range(
            0, MAX_PER_MINUTE, error=f"must be between 0 and {MAX_PER_MINUTE}, or null"
        ),
    )
    concurrencyLimit = WholeNumber(
        allow_none=True,
        validate=validate.Range(
            0, MAX_CONCURRENT, error=f"must be between 0 and {MAX_CONCURRENT}, or null"
        ),
    )


class CreateKeyInput(Input):
    # Shown on the operator's terminal by memsvc keys list.
    name = Text("MAX_NAME_CHARS", required=True, printable=True)


def error_text(messages: t.Any, prefix: str = "") -> list[str]:
    """Flatten marshmallow's nested messages into ``field: rule`` lines.

    An item of an array is named by its index: ``messages[3].content``.
    """
    if isinstance(messages, dict):
        out = []
        for key, value in messages.items():
            if key == "_schema":
                name = prefix
            elif isinstance(key, int):
                name = f"{prefix}[{key}]"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            out.extend(error_text(value, name))
        return out
    if isinstance(messages, list):
        out = []
        for item in messages:
            out.extend(error_text(item, prefix))
        return out
    return [f"{prefix}: {messages}" if prefix else str(messages)]

"""One line of an export file, read the way ``memsvc import`` takes it: by the API's rules.

Every field gets the check the API gives it (:mod:`memsvc.rules` and
:mod:`memsvc.text`, with the operator's settings): text lengths and
characters, metadata size and depth, timestamps, UUIDs (returned in the
API's lower-case form), key names and limits. A line of a tenant not being
imported is refused. A refusal is a :class:`ValueError` naming the field,
e.g. ``content must not be empty``; the caller adds the line's number.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import math
import re
import typing as t

import numpy as np

from .. import rules
from .. import tokens
from ..limits import MAX_CONCURRENT
from ..limits import MAX_PER_MINUTE
from ..models import ApiKey
from ..models import DateSpan
from ..models import Memory
from ..models import Version
from ..text import InvalidText
from ..text import shown

#: The largest version number a store keeps (a 32-bit integer column).
MAX_VERSION = 2**31 - 1
#: A key's identifier as ``keys.create`` makes it.
_KEY_ID = re.compile(r"key_[0-9a-f]{16}")
_HASH = re.compile(r"[0-9a-fA-F]{64}")

_T = t.TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Rules:
    """What a line may hold: the operator's settings and the tenants being imported."""

    #: None: every tenant in the file.
    tenants: frozenset[str] | None
    max_content_chars: int
    max_user_id_chars: int
    max_name_chars: int
    max_metadata_bytes: int
    max_metadata_depth: int
    #: Active keys a tenant may hold (0: no cap).
    max_keys_per_tenant: int

    @classmethod
    def from_settings(
        cls, settings: t.Mapping[str, t.Any], tenants: t.Iterable[str] | None
    ) -> Rules:
        return cls(
            tenants=None if tenants is None else frozenset(tenants),
            max_content_chars=settings["MAX_CONTENT_CHARS"],
            max_user_id_chars=settings["MAX_USER_ID_CHARS"],
            max_name_chars=settings["MAX_NAME_CHARS"],
            max_metadata_bytes=settings["MAX_METADATA_BYTES"],
            max_metadata_depth=settings["MAX_METADATA_DEPTH"],
            max_keys_per_tenant=settings["MAX_KEYS_PER_TENANT"],
        )

    def tenants_shown(self) -> str:
        return ", ".join(sorted(shown(tenant) for tenant in self.tenants or ()))


@dataclasses.dataclass
class MemoryLine:
    memory: Memory
    history: list[Version]
    vectors: np.ndarray | None


@dataclasses.dataclass(frozen=True)
class KeyLine:
    number: int
    key: ApiKey
    secret_hash: bytes = dataclasses.field(repr=False)


class _Required:
    pass


class _Named(rules.Invalid):
    """A refusal that names its own place in the line (not only the field's)."""


_REQUIRED: t.Any = _Required()


def _field(
    raw: dict[str, t.Any],
    name: str,
    path: str,
    rule: t.Callable[..., _T],
    *args: t.Any,
    default: t.Any = _REQUIRED,
) -> _T:
    """``raw[name]`` by ``rule``; absent (or null, with a default) gives ``default``."""
    value = raw.get(name)
    if value is None and default is not _REQUIRED:
        return t.cast(_T, default)
    if name not in raw:
        raise ValueError(f"{path} is required")
    try:
        return rule(value, *args)
    except _Named as e:
        raise ValueError(str(e)) from None
    except (rules.Invalid, InvalidText) as e:
        raise ValueError(f"{path} {e}") from None


def _tenant(value: t.Any) -> str:
    if not isinstance(value, str):
        raise rules.Invalid("must be a string")
    tokens.check_tenant(value)
    return value


def _scoped_tenant(raw: dict[str, t.Any], path: str, limits: Rules) -> str:
    tenant = _field(raw, "tenant", path, _tenant)
    if limits.tenants is not None and tenant not in limits.tenants:
        raise ValueError(
            f"{path} is {shown(tenant)!r}, not a tenant being imported ({limits.tenants_shown()})"
        )
    return tenant


def _uuid(value: t.Any) -> str:
    if not isinstance(value, str):
        raise rules.Invalid("must be a string")
    return rules.uuid(value)


def _key_id(value: t.Any) -> str:
    if not isinstance(value, str) or not _KEY_ID.fullmatch(value):
        raise rules.Invalid("must be key_ and 16 hex digits (lower-case)")
    return value


def _secret_hash(value: t.Any) -> bytes:
    if not isinstance(value, str) or not _HASH.fullmatch(value):
        raise rules.Invalid("must be 64 hexadecimal digits")
    return bytes.fromhex(value)


def _key_limit(value: t.Any, maximum: int) -> int:
    # What memsvc keys set-limits takes; null is the global setting.
    try:
        return rules.whole_number(value, 0, maximum)
    except rules.Invalid:
        raise rules.Invalid(
            f"must be a whole number from 0 (no limit) to {maximum}, or null"
        ) from None


def _vectors(encoded: t.Any, dims: int) -> np.ndarray:
    if not isinstance(encoded, list) or not encoded:
        raise rules.Invalid("must be a non-empty list")
    try:
        raw = [base64.b64decode(v, validate=True) for v in encoded]
    except (ValueError, TypeError):
        raise rules.Invalid("must be base64 of little-endian float32") from None
    sizes = {len(r) for r in raw}
    if any(size % 4 for size in sizes):
        raise rules.Invalid("must be base64 of little-endian float32")
    if dims and sizes != {dims * 4}:
        raise rules.Invalid(f"must have {dims} dimensions")
    if len(sizes) != 1:
        raise rules.Invalid("must all have the same dimensions")
    # One buffer for all windows, read in place: no array per window to stack.
    vectors = np.frombuffer(bytearray(b"".join(raw)), dtype="<f4").reshape(len(raw), -1)
    vectors = vectors.astype(np.float32, copy=False)
    if _plainly_valid(vectors):
        return vectors
    if not np.isfinite(vectors).all():
        raise rules.Invalid("must be finite numbers")
    # No direction: no query is ever near it, and cosine distance divides by its norm.
    zero = np.flatnonzero(~vectors.any(axis=1))
    if len(zero):
        raise _Named(f"vectors[{zero[0]}] is all zeros: such a memory could never be found")
    return vectors


def _plainly_valid(vectors: np.ndarray) -> bool:
    """Whether each window is finite numbers, not all zeros, told by its sum of squares.

    In doubles, a float32 window's sum of squares neither overflows nor
    underflows: it is NaN, infinite or zero exactly for the windows the
    checks refuse. One product per line instead of a pass per check; the
    checks run only to name the fault.
    """
    if len(vectors) == 1:
        row = vectors[0].astype(np.float64)
        square = float(row @ row)
        return math.isfinite(square) and square > 0
    rows = vectors.astype(np.float64)
    squares = np.einsum("ij,ij->i", rows, rows)
    return bool(np.isfinite(squares).all() and squares.all())


def _history(entries: t.Any, version: int, limits: Rules) -> list[Version]:
    """A memory's earlier versions: increasing version numbers below its own."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ValueError("history must be a list")
    out: list[Version] = []
    for i, entry in enumerate(entries):
        path = f"history[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{path} must be an object")
        number = _field(entry, "version", f"{path}.version", rules.whole_number, 1, MAX_VERSION)
        if number >= version or (out and number <= out[-1].version):
            after = f"above history[{i - 1}]'s and " if out else ""
            raise ValueError(f"{path}.version must be {after}below the memory's ({version})")
        content = _field(entry, "content", f"{path}.content", rules.text, limits.max_content_chars)
        metadata = _field(
            entry, "metadata", f"{path}.metadata", rules.metadata,
            limits.max_metadata_depth, limits.max_metadata_bytes, default={},
        )  # fmt: skip
        at = _field(entry, "at", f"{path}.at", rules.timestamp)
        out.append(Version(number, content, metadata, "add" if number == 1 else "update", at))
    return out


def _memory(raw: dict[str, t.Any], dims: int, limits: Rules) -> MemoryLine:
    tenant = _scoped_tenant(raw, "tenant", limits)
    memory_id = _field(raw, "id", "id", _uuid)
    user_id = _field(raw, "userId", "userId", rules.text, limits.max_user_id_chars)
    content = _field(raw, "content", "content", rules.text, limits.max_content_chars)
    metadata = _field(
        raw, "metadata", "metadata", rules.metadata,
        limits.max_metadata_depth, limits.max_metadata_bytes, default={},
    )  # fmt: skip
    created = _field(raw, "createdAt", "createdAt", rules.timestamp)
    memory = Memory(
        id=memory_id,
        tenant=tenant,
        user_id=user_id,
        content=content,
        metadata=metadata,
        created_at=created,
        updated_at=_field(raw, "updatedAt", "updatedAt", rules.timestamp, default=created),
        expires_at=_field(raw, "expiresAt", "expiresAt", rules.timestamp, default=None),
        version=_field(raw, "version", "version", rules.whole_number, 1, MAX_VERSION, default=1),
    )
    memory = _conversation(raw, memory, limits)
    history = _history(raw.get("history"), memory.version, limits)
    vectors = _field(raw, "vectors", "vectors", _vectors, dims, default=None)
    return MemoryLine(memory, history, vectors)


_ROLES = ("user", "assistant", "system", "tool")
#: The UTC offsets ISO 8601 times can have, in minutes.
_MAX_OFFSET = 24 * 60 - 1


def _one_of(value: t.Any, choices: t.Sequence[str]) -> str:
    if value not in choices:
        raise rules.Invalid(f"must be one of {', '.join(choices)}")
    return t.cast(str, value)


def _date(value: t.Any) -> str:
    if not isinstance(value, str):
        raise rules.Invalid("must be a date string")
    try:
        return datetime.date.fromisoformat(value).isoformat()
    except ValueError:
        raise rules.Invalid("must be a date such as 2023-05-07") from None


def _dates(value: t.Any, max_chars: int) -> tuple[DateSpan, ...]:
    if not isinstance(value, list) or not value:
        raise rules.Invalid("must be a non-empty list")
    out = []
    for span in value:
        if not isinstance(span, dict) or set(span) != {"text", "start", "end"}:
            raise rules.Invalid("must hold objects of text, start and end")
        start, end = _date(span["start"]), _date(span["end"])
        if start > end:
            raise rules.Invalid("must have each start at or before its end")
        out.append(DateSpan(rules.text(span["text"], max_chars), start, end))
    return tuple(out)


def _sources(value: t.Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise rules.Invalid("must be a list")
    return tuple(_uuid(v) for v in value)


#: The fields only a message or a fact has: an ordinary memory's line has none.
_CONVERSATION_FIELDS = frozenset(
    ("kind", "occurredAt", "timeOffset", "sessionId", "role", "speaker", "position",
     "messageId", "dates", "sources", "supersededBy", "validTo")
)  # fmt: skip


def _conversation(raw: dict[str, t.Any], memory: Memory, limits: Rules) -> Memory:
    """The fields of a message or a fact (version 3), each checked as the API checks it."""
    if _CONVERSATION_FIELDS.isdisjoint(raw):
        return memory  # none of them: every one would be None, as ``memory`` has them
    kind = _field(raw, "kind", "kind", _one_of, ("message", "fact"), default=None)
    occurred = _field(raw, "occurredAt", "occurredAt", rules.timestamp, default=None)
    offset = _field(
        raw, "timeOffset", "timeOffset", rules.whole_number, -_MAX_OFFSET, _MAX_OFFSET,
        default=None,
    )  # fmt: skip
    session = _field(
        raw, "sessionId", "sessionId", rules.text, limits.max_user_id_chars, default=None
    )
    role = _field(raw, "role", "role", _one_of, _ROLES, default=None)
    speaker = _field(raw, "speaker", "speaker", rules.text, limits.max_name_chars, default=None)
    position = _field(raw, "position", "position", rules.whole_number, 0, 2**62, default=None)
    message_id = _field(
        raw, "messageId", "messageId", rules.text, limits.max_name_chars, default=None
    )
    if session is None:
        if any(v is not None for v in (role, speaker, position, message_id)):
            raise ValueError("role, speaker, position and messageId need a sessionId")
    elif kind != "message" or role is None or position is None:
        raise ValueError("a message (sessionId) needs kind message, a role and a position")
    return dataclasses.replace(
        memory,
        kind=kind,
        occurred_at=occurred,
        offset=offset if occurred is not None else None,
        session_id=session,
        role=role,
        speaker=speaker,
        position=position,
        message_id=message_id,
        dates=_field(raw, "dates", "dates", _dates, limits.max_content_chars, default=None),
        sources=_field(raw, "sources", "sources", _sources, default=None),
        superseded_by=_field(raw, "supersededBy", "supersededBy", _uuid, default=None),
        valid_to=_field(raw, "validTo", "validTo", rules.timestamp, default=None),
    )


def _key(raw: dict[str, t.Any], number: int, limits: Rules) -> KeyLine:
    """An ``{"apiKey": {...}}`` line: the key and its secret's hash."""
    record = raw["apiKey"]
    if not isinstance(record, dict) or len(raw) != 1:
        raise ValueError("apiKey must be the line's only field, an object")
    tenant = _scoped_tenant(record, "apiKey.tenant", limits)
    secret_hash = _field(record, "secretHash", "apiKey.secretHash", _secret_hash)
    key = ApiKey(
        id=_field(record, "id", "apiKey.id", _uuid),
        tenant=tenant,
        key_id=_field(record, "keyId", "apiKey.keyId", _key_id),
        # Printable: memsvc keys list shows it on the operator's terminal.
        name=_field(record, "name", "apiKey.name", _printable, limits.max_name_chars),
        created_at=_field(record, "createdAt", "apiKey.createdAt", rules.timestamp),
        last_used_at=_field(
            record, "lastUsedAt", "apiKey.lastUsedAt", rules.timestamp, default=None
        ),
        revoked_at=_field(record, "revokedAt", "apiKey.revokedAt", rules.timestamp, default=None),
    )
    return KeyLine(number, dataclasses.replace(key, **_key_limits(record)), secret_hash)


def _key_limits(record: dict[str, t.Any]) -> dict[str, t.Any]:
    """A key's limits: its tenant's and its operator's (a file without the
    operator's, from before they were apart, holds one pair: taken as both)."""
    out: dict[str, t.Any] = {}
    for field, name, maximum in (
        ("rateLimit", "rate_limit", MAX_PER_MINUTE),
        ("concurrencyLimit", "concurrency_limit", MAX_CONCURRENT),
    ):
        own = _field(record, field, f"apiKey.{field}", _key_limit, maximum, default=None)
        ceiling_field = field.replace("Limit", "Ceiling")
        ceiling = _field(
            record, ceiling_field, f"apiKey.{ceiling_field}", _key_limit, maximum, default=None
        )
        out[name] = own
        out[name.replace("limit", "ceiling")] = own if ceiling_field not in record else ceiling
    return out


def _printable(value: t.Any, max_chars: int) -> str:
    return rules.text(value, max_chars, printable=True)


def read_line(line: str, number: int, dims: int, limits: Rules) -> MemoryLine | KeyLine:
    """A memory line, or a key line, checked; :class:`ValueError` says what is wrong."""
    try:
        raw = rules.strict_json(line)
    except ValueError as e:
        raise ValueError(f"not JSON ({e})") from None
    except RecursionError:
        raise ValueError("not JSON (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if "apiKey" in raw:
        return _key(raw, number, limits)
    return _memory(raw, dims, limits)

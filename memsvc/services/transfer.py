"""``memsvc export`` and ``memsvc import``: memories in and out as JSON Lines.

The file is one header line, then the API keys (of the whole database or
of the exported tenant; none when one end user is exported), then one
memory per line, oldest first::

    {"format": "memsvc-export", "version": 2, "model": "local:all-MiniLM-L6-v2",
     "dimensions": 384, "exportedAt": "...", "tenant": null, "userId": null, "memories": 2,
     "apiKeys": 1}
    {"apiKey": {"id": "...", "tenant": "acme", "keyId": "...", "name": "...",
     "secretHash": "<hex of SHA-256>", "createdAt": "...", "lastUsedAt": null,
     "revokedAt": null, "rateLimit": null, "concurrencyLimit": null}}
    {"id": "...", "tenant": "acme", "userId": "alice", "content": "...", "metadata": {},
     "createdAt": "...", "updatedAt": "...", "expiresAt": null, "version": 2,
     "history": [{"version": 1, "content": "...", "metadata": {}, "event": "add", "at": "..."}],
     "vectors": ["<base64 of little-endian float32>", ...]}

Times are ISO 8601 with milliseconds, exactly as the API shows them, and
vectors are the stored bits, so a database imported from an export answers
``getAll`` and ``search`` exactly as the one exported. Import checks the
whole file before writing anything, skips memories and keys it already
has (run it again after an interruption and it carries on), and embeds the
text again when the file's vectors come from another model. Keys travel as
the hashes the database keeps, never as secrets: callers keep using theirs
after a move. Version 1 files (memories only) still import.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import itertools
import json
import typing as t

import numpy as np

from .. import clock
from ..embeddings import Embedder
from ..embeddings.windows import document_vectors
from ..models import ApiKey
from ..models import Memory
from ..models import Version
from ..store import Store

FORMAT = "memsvc-export"
FORMAT_VERSION = 2
#: Versions import reads: 1 had no API keys.
READABLE_VERSIONS = (1, 2)
#: Memories read per round of ``Store.exported`` (vectors and history in bulk).
EXPORT_BATCH = 500

Progress = t.Callable[[int, int], None]


class InvalidImport(ValueError):
    """The file cannot be imported; nothing was."""


@dataclasses.dataclass
class ExportResult:
    memories: int = 0
    api_keys: int = 0


@dataclasses.dataclass
class ImportResult:
    imported: int = 0
    existing: int = 0
    expired: int = 0
    reembedded: bool = False
    keys_imported: int = 0
    keys_existing: int = 0


def _iso(ms: int | None) -> str | None:
    return None if ms is None else clock.iso(ms)


def _vector_text(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def count(store: Store, tenant: str | None, user_id: str | None) -> int:
    return store.count_memories(tenant, user_id, clock.now_ms())


def export(
    store: Store,
    out: t.TextIO,
    *,
    tenant: str | None = None,
    user_id: str | None = None,
    progress: Progress = lambda done, total: None,
) -> ExportResult:
    """Write the memories (of one tenant, of one user) and keys to ``out``.

    One read transaction: the file is one moment's snapshot.
    """
    with store.read():
        now = clock.now_ms()
        model, dims = store.embedder() or ("", 0)
        total = store.count_memories(tenant, user_id, now)
        # Keys belong to a tenant: an export of one end user carries none.
        keys = store.keys_with_hashes(tenant) if user_id is None else []
        header = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "model": model,
            "dimensions": dims,
            "exportedAt": clock.iso(now),
            "tenant": tenant,
            "userId": user_id,
            "memories": total,
            "apiKeys": len(keys),
        }
        out.write(json.dumps(header, ensure_ascii=False) + "\n")
        for key, secret_hash in keys:
            out.write(_key_line(key, secret_hash))
        done = 0
        rows = store.all_memories(tenant, user_id, now)
        while chunk := list(itertools.islice(rows, EXPORT_BATCH)):
            for (_, memory, _, windows), (vectors, versions) in zip(
                chunk, store.exported(chunk), strict=True
            ):
                out.write(_record_line(memory, versions, vectors[:windows]))
                done += 1
                if done % 100 == 0 or done == total:
                    progress(done, total)
    return ExportResult(done, len(keys))


def _key_line(key: ApiKey, secret_hash: bytes) -> str:
    record = {
        "id": key.id,
        "tenant": key.tenant,
        "keyId": key.key_id,
        "name": key.name,
        "secretHash": secret_hash.hex(),
        "createdAt": clock.iso(key.created_at),
        "lastUsedAt": _iso(key.last_used_at),
        "revokedAt": _iso(key.revoked_at),
        "rateLimit": key.rate_limit,
        "concurrencyLimit": key.concurrency_limit,
    }
    return json.dumps({"apiKey": record}, ensure_ascii=False, separators=(",", ":")) + "\n"


def _record_line(memory: Memory, versions: list[Version], vectors: np.ndarray) -> str:
    record = {
        "id": memory.id,
        "tenant": memory.tenant,
        "userId": memory.user_id,
        "content": memory.content,
        "metadata": memory.metadata,
        "createdAt": clock.iso(memory.created_at),
        "updatedAt": clock.iso(memory.updated_at),
        "expiresAt": _iso(memory.expires_at),
        "version": memory.version,
        "history": [
            {
                "version": v.version,
                "content": v.content,
                "metadata": v.metadata,
                "event": v.event,
                "at": clock.iso(v.at),
            }
            for v in versions
        ],
        "vectors": [_vector_text(v) for v in vectors],
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


# -- import -----------------------------------------------------------------------------


@dataclasses.dataclass
class _Record:
    memory: Memory
    history: list[Version]
    vectors: np.ndarray | None


def _time(value: t.Any, field: str, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field} must be an ISO 8601 timestamp")
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{field} must be an ISO 8601 timestamp, not {value[:40]!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{field} must say its time zone")
    return int(parsed.timestamp() * 1000)


def _text(value: t.Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ValueError(f"{field} must be a non-empty string")
    return value


def _record(raw: dict[str, t.Any], dims: int) -> _Record:
    memory_id = _text(raw.get("id"), "id")
    tenant = _text(raw.get("tenant"), "tenant")
    user_id = _text(raw.get("userId"), "userId")
    content = _text(raw.get("content"), "content")
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError("metadata must be an object")
    version = raw.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError("version must be a whole number from 1")
    created = _time(raw.get("createdAt"), "createdAt")
    assert created is not None
    memory = Memory(
        id=memory_id,
        tenant=tenant,
        user_id=user_id,
        content=content,
        metadata=metadata,
        created_at=created,
        updated_at=_time(raw.get("updatedAt", raw.get("createdAt")), "updatedAt") or created,
        expires_at=_time(raw.get("expiresAt"), "expiresAt", optional=True),
        version=version,
    )
    history = []
    for i, v in enumerate(raw.get("history") or []):
        if not isinstance(v, dict) or not isinstance(v.get("metadata", {}), dict):
            raise ValueError(f"history[{i}] must be an object with content and metadata")
        at = _time(v.get("at"), f"history[{i}].at")
        assert at is not None
        number = v.get("version")
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise ValueError(f"history[{i}].version must be a whole number from 1")
        history.append(
            Version(
                number,
                _text(v.get("content"), f"history[{i}].content"),
                v.get("metadata", {}),
                "add" if number == 1 else "update",
                at,
            )
        )
    vectors = None
    encoded = raw.get("vectors")
    if encoded is not None:
        if not isinstance(encoded, list) or not encoded:
            raise ValueError("vectors must be a non-empty list")
        try:
            rows = [np.frombuffer(base64.b64decode(v, validate=True), dtype="<f4") for v in encoded]
        except (ValueError, TypeError):
            raise ValueError("vectors must be base64 of little-endian float32") from None
        if dims and any(len(r) != dims for r in rows):
            raise ValueError(f"vectors must have {dims} dimensions")
        vectors = np.vstack(rows).astype(np.float32)
        if not np.isfinite(vectors).all():
            raise ValueError("vectors must be finite numbers")
    return _Record(memory, history, vectors)


def _limit(value: t.Any, field: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{field} must be a whole number from 0, or null")
    return value


def _key_record(raw: dict[str, t.Any]) -> tuple[ApiKey, bytes]:
    """An ``{"apiKey": {...}}`` line: the key and its secret's hash."""
    record = raw["apiKey"]
    if not isinstance(record, dict) or len(raw) != 1:
        raise ValueError("apiKey must be the line's only field, an object")
    secret_hash = record.get("secretHash")
    if not isinstance(secret_hash, str) or len(secret_hash) != 64:
        raise ValueError("apiKey.secretHash must be 64 hexadecimal digits")
    try:
        digest = bytes.fromhex(secret_hash)
    except ValueError:
        raise ValueError("apiKey.secretHash must be 64 hexadecimal digits") from None
    name = record.get("name")
    if not isinstance(name, str):
        raise ValueError("apiKey.name must be a string")
    created = _time(record.get("createdAt"), "apiKey.createdAt")
    assert created is not None
    key = ApiKey(
        id=_text(record.get("id"), "apiKey.id"),
        tenant=_text(record.get("tenant"), "apiKey.tenant"),
        key_id=_text(record.get("keyId"), "apiKey.keyId"),
        name=name,
        created_at=created,
        last_used_at=_time(record.get("lastUsedAt"), "apiKey.lastUsedAt", optional=True),
        revoked_at=_time(record.get("revokedAt"), "apiKey.revokedAt", optional=True),
        rate_limit=_limit(record.get("rateLimit"), "apiKey.rateLimit"),
        concurrency_limit=_limit(record.get("concurrencyLimit"), "apiKey.concurrencyLimit"),
    )
    return key, digest


def _line(line: str, dims: int) -> _Record | tuple[ApiKey, bytes]:
    """A memory line as a :class:`_Record`, or a key line as ``(key, secret hash)``."""
    try:
        raw = json.loads(line)
    except ValueError as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if "apiKey" in raw:
        return _key_record(raw)
    return _record(raw, dims)


def read_header(line: str) -> dict[str, t.Any]:
    try:
        header = json.loads(line)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InvalidImport(f"line 1: not a {FORMAT} header")
    if header.get("version") not in READABLE_VERSIONS:
        raise InvalidImport(f"line 1: format version {header.get('version')!r} is not supported")
    if not isinstance(header.get("model"), str) or not isinstance(header.get("dimensions"), int):
        raise InvalidImport("line 1: the header must name the model and its dimensions")
    return header


def check(lines: t.Iterable[str]) -> tuple[dict[str, t.Any], int]:
    """Read the whole file once: its header and how many memories, or :class:`InvalidImport`."""
    header: dict[str, t.Any] | None = None
    n = 0
    ids: set[str] = set()
    key_ids: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if number == 1:
            header = read_header(line)
            continue
        if not line.strip():
            continue
        try:
            record = _line(line, header["dimensions"] if header else 0)
        except ValueError as e:
            raise InvalidImport(f"line {number}: {e}") from None
        if not isinstance(record, _Record):
            if record[0].id in key_ids:
                raise InvalidImport(f"line {number}: the key {record[0].id} appears twice")
            key_ids.add(record[0].id)
            continue
        if record.memory.id in ids:
            raise InvalidImport(f"line {number}: the id {record.memory.id} appears twice")
        ids.add(record.memory.id)
        n += 1
    if header is None:
        raise InvalidImport("the file is empty")
    return header, n


def _import_key(store: Store, key: ApiKey, secret_hash: bytes, result: ImportResult) -> None:
    with store.write():
        if store.get_key(key.id) is not None or store.key_by_hash(secret_hash) is not None:
            result.keys_existing += 1
            return
        store.insert_key(key, secret_hash)
    result.keys_imported += 1


def import_(
    store: Store,
    embedder: Embedder,
    lines: t.Iterable[str],
    *,
    header: dict[str, t.Any],
    total: int,
    batch_size: int = 500,
    progress: Progress = lambda done, total: None,
) -> ImportResult:
    """Import memories from a file :func:`check` accepted; see the module's description."""
    recorded = store.embedder()
    same_model = recorded == (header["model"], header["dimensions"])
    result = ImportResult(reembedded=not same_model)
    batch: list[_Record] = []
    done = 0

    def flush() -> None:
        nonlocal batch
        if not batch:
            return
        now = clock.now_ms()
        with store.read():
            known = store.existing_ids([r.memory.id for r in batch])
        fresh = []
        for record in batch:
            if record.memory.id in known:
                result.existing += 1
            elif record.memory.expires_at is not None and record.memory.expires_at <= now:
                result.expired += 1
            else:
                fresh.append(record)
        if not same_model or any(r.vectors is None for r in fresh):
            vectors = document_vectors(embedder, [r.memory.content for r in fresh])
        else:
            vectors = [r.vectors for r in fresh]  # type: ignore[misc]
        with store.write():
            seqs = store.insert_memories([r.memory for r in fresh], vectors)
            for seq, record in zip(seqs, fresh, strict=True):
                store.insert_versions(seq, record.history)
        result.imported += len(fresh)
        batch = []

    for number, line in enumerate(lines, start=1):
        if number == 1 or not line.strip():
            continue
        record = _line(line, header["dimensions"])
        if not isinstance(record, _Record):
            _import_key(store, *record, result)
            continue
        batch.append(record)
        done += 1
        if len(batch) >= batch_size:
            flush()
            progress(done, total)
    flush()
    progress(done, total)
    if result.imported:
        store.refresh_statistics()
    return result

"""``memsvc export`` and ``memsvc import``: memories in and out as JSON Lines.

The file is one header line, then the API keys (of the whole database or
of the exported tenant; none when one end user is exported), then one
memory per line, oldest first::

    {"format": "memsvc-export", "version": 3, "model": "local:all-MiniLM-L6-v2",
     "dimensions": 384, "exportedAt": "...", "tenant": null, "userId": null, "memories": 2,
     "apiKeys": 1}
    {"apiKey": {"id": "...", "tenant": "acme", "keyId": "...", "name": "...",
     "secretHash": "<hex of SHA-256>", "createdAt": "...", "lastUsedAt": null,
     "revokedAt": null, "rateLimit": null, "concurrencyLimit": null}}
    {"id": "...", "tenant": "acme", "userId": "alice", "content": "...", "metadata": {},
     "createdAt": "...", "updatedAt": "...", "expiresAt": null, "version": 2,
     "history": [{"version": 1, "content": "...", "metadata": {}, "event": "add", "at": "..."}],
     "vectors": ["<base64 of little-endian float32>", ...]}

A message or a fact carries its other fields too, each only when set, as the
API shows them (``kind``, ``occurredAt``, ``sessionId``, ``role``,
``speaker``, ``position``, ``messageId``, ``dates``, ``sources``,
``supersededBy``, ``validTo``), and ``timeOffset``, the UTC offset in minutes
its time was given in (version 3).

Times are ISO 8601 with milliseconds, exactly as the API shows them, and
vectors are the stored bits, so a database imported from an export answers
``getAll`` and ``search`` exactly as the one exported. Keys travel as the
hashes the database keeps, never as secrets: callers keep using theirs
after a move. Version 1 files (memories only) and version 2 files (without
conversations) still import.

Import trusts no line: it writes only the tenants it is given
(:class:`~memsvc.services.import_lines.Rules`), and checks every field by
the API's own rules and the operator's settings, ids in the API's
lower-case form, and keys against the database's (identifiers and
secrets taken, the per-tenant cap). The whole file is checked before
anything is written, by the same reading the import then does. It skips
memories and keys it already has (run it again after an interruption and
it carries on), and embeds the text again when the file's vectors come
from another model.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import itertools
import json
import typing as t

import numpy as np

from .. import clock
from .. import rules
from .. import tokens
from .. import wire
from ..embeddings import Embedder
from ..embeddings.windows import document_vectors
from ..models import ApiKey
from ..models import Memory
from ..models import Version
from ..store import FullStore
from ..text import InvalidText
from ..text import shown
from .import_lines import KeyLine
from .import_lines import MemoryLine
from .import_lines import Rules
from .import_lines import read_line

FORMAT = "memsvc-export"
FORMAT_VERSION = 3
#: Versions import reads: 1 had no API keys, 2 no conversations.
READABLE_VERSIONS = (1, 2, 3)
#: Memories read per round of ``Store.exported`` (vectors and history in bulk).
EXPORT_BATCH = 500
#: Memories ``memsvc import`` writes per transaction. Each commit writes every
#: page the batch touched (the keyword index's rows of a batch spread over as
#: many pages as it has users) and waits for the disk; 5,000 a transaction
#: took a 20,000-memory import from 81 commits to 9 and from 6.2 to 1.6 s of
#: committing. A transaction holds SQLite's write lock about a second.
IMPORT_BATCH = 5000
#: A batch is written sooner once its lines reach this many characters: large
#: memories (long texts, many windows, long histories) keep memory use bounded.
IMPORT_BATCH_CHARS = 64 << 20

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


def count(store: FullStore, tenant: str | None, user_id: str | None) -> int:
    return store.count_memories(tenant, user_id, clock.now_ms())


def export(
    store: FullStore,
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
        "rateCeiling": key.rate_ceiling,
        "concurrencyCeiling": key.concurrency_ceiling,
    }
    return json.dumps({"apiKey": record}, ensure_ascii=False, separators=(",", ":")) + "\n"


#: An export line's memory fields, in the file's order, by their names there:
#: the API's Memory (:data:`memsvc.wire.MEMORY`) with its tenant called
#: ``tenant``, and ``"expiresAt": null`` for a memory that never expires.
MEMORY_FIELDS = {
    "id": "id",
    "tenant": "idpUserId",
    "userId": "userId",
    "content": "content",
    "metadata": "metadata",
    "createdAt": "createdAt",
    "updatedAt": "updatedAt",
    "expiresAt": "expiresAt",
}
#: The Memory's fields a line holds only when the memory has them (version 3),
#: after :data:`MEMORY_FIELDS`, by the same names.
MEMORY_EXTRAS = (
    "kind", "occurredAt", "sessionId", "role", "speaker", "position", "messageId", "dates",
    "sources", "supersededBy", "validTo",
)  # fmt: skip


def _record_line(memory: Memory, versions: list[Version], vectors: np.ndarray) -> str:
    values = wire.MEMORY.values(memory)
    record = {name: values[field] for name, field in MEMORY_FIELDS.items()}
    for name in MEMORY_EXTRAS:
        if values[name] is not None:
            record[name] = values[name]
    if memory.offset is not None:
        record["timeOffset"] = memory.offset
    record["version"] = memory.version
    record["history"] = [wire.VERSION.json(v) for v in versions]
    record["vectors"] = [_vector_text(v) for v in vectors]
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


# -- import -----------------------------------------------------------------------------


@dataclasses.dataclass
class Checked:
    """A file :func:`check` accepted: its header, how many memories, and its keys."""

    header: dict[str, t.Any]
    memories: int
    keys: list[KeyLine]


@dataclasses.dataclass
class _KeyPlan:
    new: list[KeyLine]
    existing: int


#: The longest line ``memsvc import`` reads by default, in characters: a
#: memory at the API's largest (64 Ki characters of text and 64 KiB of
#: metadata, each taking up to 6 characters a character as JSON escapes,
#: and 800 windows' vectors of 1,536 dimensions) with a dozen earlier
#: versions as large. A longer line is refused before it is parsed.
MAX_LINE_CHARS = 16 * 1024 * 1024


def read_lines(f: t.TextIO, max_chars: int = MAX_LINE_CHARS) -> t.Iterator[str]:
    """The lines of ``f``, each read only up to ``max_chars``: :class:`InvalidImport` past it.

    A line's JSON, parsed, takes many times its size (tens of bytes for
    each small number or empty object): one far past what memsvc writes is
    refused before anything of it is parsed, or even read whole.
    """
    number = 0
    while True:
        line = f.readline(max_chars + 1)
        if not line:
            return
        number += 1
        if len(line) > max_chars and line[max_chars:] != "\n":
            raise InvalidImport(
                f"line {number}: longer than {max_chars:,} characters, more than a memory "
                "memsvc writes takes (raise the bound with --max-line-chars)"
            )
        yield line


def read_header(line: str) -> dict[str, t.Any]:
    if not line:
        raise InvalidImport("the file is empty")
    try:
        header = rules.strict_json(line)
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InvalidImport(f"line 1: not a {FORMAT} header")
    if header.get("version") not in READABLE_VERSIONS:
        raise InvalidImport(f"line 1: format version {header.get('version')!r} is not supported")
    dims = header.get("dimensions")
    if not isinstance(header.get("model"), str) or not isinstance(dims, int) or dims < 0:
        raise InvalidImport("line 1: the header must name the model and its dimensions")
    tenant = header.get("tenant")
    if tenant is not None:
        try:
            if not isinstance(tenant, str):
                raise InvalidText("must be a string")
            tokens.check_tenant(tenant)
        except InvalidText as e:
            raise InvalidImport(f"line 1: the header's tenant {e}, or null") from None
    return header


def _read(line: str, number: int, dims: int, limits: Rules) -> MemoryLine | KeyLine:
    try:
        return read_line(line, number, dims, limits)
    except ValueError as e:
        raise InvalidImport(f"line {number}: {e}") from None


def _plan_keys(store: FullStore, keys: list[KeyLine], limits: Rules) -> _KeyPlan:
    """Which of the file's keys are new; :class:`InvalidImport` for one that cannot be added.

    A key whose id the database has is there already (an earlier run). A
    new one must not reuse another key's identifier or secret, and must
    leave its tenant within the cap on active keys.
    """
    stored = store.keys_with_hashes(None)
    stored_ids = {k.id for k, _ in stored}
    stored_key_ids = {k.key_id for k, _ in stored}
    stored_hashes = {h for _, h in stored}
    active = collections.Counter(k.tenant for k, _ in stored if k.active)
    seen: dict[t.Any, int] = {}
    plan = _KeyPlan([], 0)
    cap = limits.max_keys_per_tenant
    for line in keys:
        key, where = line.key, f"line {line.number}"
        if ("id", key.id) in seen:
            raise InvalidImport(f"{where}: the key {key.id} appears twice")
        for field, value in (("keyId", key.key_id), ("secretHash", line.secret_hash)):
            if (field, value) in seen:
                raise InvalidImport(f"{where}: apiKey.{field} is also line {seen[field, value]}'s")
        seen.update({("id", key.id): line.number, ("keyId", key.key_id): line.number})
        seen["secretHash", line.secret_hash] = line.number
        if key.id in stored_ids:
            plan.existing += 1
            continue
        if key.key_id in stored_key_ids:
            raise InvalidImport(f"{where}: apiKey.keyId is another API key's already")
        if line.secret_hash in stored_hashes:
            raise InvalidImport(f"{where}: apiKey.secretHash is another API key's already")
        if key.active:
            active[key.tenant] += 1
            if cap and active[key.tenant] > cap:
                raise InvalidImport(
                    f"{where}: tenant {shown(key.tenant)!r} would have {active[key.tenant]} "
                    f"active API keys, more than {cap} (MEMSVC_MAX_KEYS_PER_TENANT)"
                )
        plan.new.append(line)
    return plan


def check(store: FullStore, lines: t.Iterable[str], limits: Rules) -> Checked:
    """Read the whole file by the rules import applies; :class:`InvalidImport` names a bad line.

    Writes nothing. Keys are checked against the database's as well.
    """
    header: dict[str, t.Any] | None = None
    n = 0
    ids: set[str] = set()
    keys: list[KeyLine] = []
    for number, line in enumerate(lines, start=1):
        if number == 1:
            header = read_header(line)
            continue
        assert header is not None
        if not line.strip():
            continue
        record = _read(line, number, header["dimensions"], limits)
        if isinstance(record, KeyLine):
            keys.append(record)
            continue
        if record.memory.id in ids:
            raise InvalidImport(f"line {number}: the id {record.memory.id} appears twice")
        ids.add(record.memory.id)
        n += 1
    if header is None:
        raise InvalidImport("the file is empty")
    with store.read():
        _plan_keys(store, keys, limits)
    return Checked(header, n, keys)


def import_(
    store: FullStore,
    embedder: Embedder,
    lines: t.Iterable[str],
    checked: Checked,
    limits: Rules,
    *,
    batch_size: int = IMPORT_BATCH,
    progress: Progress = lambda done, total: None,
) -> ImportResult:
    """Import a file :func:`check` accepted with the same ``limits``; see the module's description.

    The keys go first, all in one transaction, checked again against the
    database as it is then; then the memories, a batch per transaction.
    """
    header, total = checked.header, checked.memories
    recorded = store.embedder()
    same_model = recorded == (header["model"], header["dimensions"])
    result = ImportResult(reembedded=not same_model)
    try:
        with store.write():
            plan = _plan_keys(store, checked.keys, limits)
            for new in plan.new:
                store.insert_key(new.key, new.secret_hash)
    except InvalidImport as e:
        raise InvalidImport(
            f"{e}: the database changed since the check; nothing was imported"
        ) from None
    result.keys_imported, result.keys_existing = len(plan.new), plan.existing
    batch: list[MemoryLine] = []
    held = 0  # characters of the batch's lines
    done = 0

    def flush() -> None:
        nonlocal batch, held
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
                if record.history:
                    store.insert_versions(seq, record.history)
        result.imported += len(fresh)
        batch, held = [], 0

    with store.loading():
        for number, line in enumerate(lines, start=1):
            if number == 1 or not line.strip():
                continue
            try:
                record = read_line(line, number, header["dimensions"], limits)
            except ValueError as e:
                flush()  # so that what the error says holds: the lines before it are in
                raise InvalidImport(
                    f"line {number}: {e}; the file changed since it was checked: the memories "
                    "before this line were imported"
                ) from None
            if isinstance(record, KeyLine):
                continue
            batch.append(record)
            held += len(line)
            done += 1
            if len(batch) >= batch_size or held >= IMPORT_BATCH_CHARS:
                flush()
                progress(done, total)
        flush()
        progress(done, total)
    if result.imported:
        store.refresh_statistics()
    return result

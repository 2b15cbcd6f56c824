"""Export, import and re-embedding, in the SQL both stores take alike."""

from __future__ import annotations

import typing as t

import numpy as np

from ...models import ApiKey
from ...models import Memory
from ...models import Version
from ...models import compact_json
from .. import postings
from ..base import KEY_COLUMNS
from ..base import MEMORY_COLUMNS
from ..base import MEMORY_WIDTH
from ..base import key_of
from ..base import memory_of
from .frame import VISIBLE
from .frame import SqlFrame


class SqlBulk(SqlFrame):
    """Every memory with its vectors and history out, memories and versions in, and every
    vector replaced by another model's."""

    def insert_versions(self, seq: int, versions: t.Sequence[Version]) -> None:
        self._many(
            "INSERT INTO memory_history (memory_seq, version, content, metadata, at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(seq, v.version, v.content, compact_json(v.metadata), v.at) for v in versions],
        )

    def _where_owner(self, tenant: str | None, user_id: str | None) -> tuple[str, list[t.Any]]:
        where, params = [], []
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        return " AND ".join(where) or "1 = 1", params

    def count_memories(self, tenant: str | None, user_id: str | None, now: int) -> int:
        where, params = self._where_owner(tenant, user_id)
        (n,) = self._one(
            f"SELECT count(*) FROM memories WHERE {where} AND {VISIBLE}", (*params, now)
        )
        return int(n)

    def all_memories(
        self, tenant: str | None, user_id: str | None, now: int
    ) -> t.Iterator[tuple[int, Memory, int, int]]:
        where, params = self._where_owner(tenant, user_id)
        for row in self._stream(
            f"SELECT seq, {MEMORY_COLUMNS}, first_vid, windows FROM memories "
            f"WHERE {where} AND {VISIBLE} ORDER BY seq",
            (*params, now),
        ):
            end = 1 + MEMORY_WIDTH
            yield row[0], memory_of(row[1:end]), row[end], row[end + 1]

    def existing_ids(self, ids: t.Sequence[str]) -> set[str]:
        found: set[str] = set()
        for condition, params in self._any("id", list(ids)):
            rows = self._rows(f"SELECT id FROM memories WHERE {condition}", params)
            found.update(row[0] for row in rows)
        return found

    def exported(
        self, memories: t.Sequence[tuple[int, Memory, int, int]]
    ) -> list[tuple[np.ndarray, list[Version]]]:
        return [
            (
                self.vectors(m.tenant, m.user_id, np.arange(first, first + windows)),
                self.versions(seq),
            )
            for seq, m, first, windows in memories
        ]

    def keys_with_hashes(self, tenant: str | None = None) -> list[tuple[ApiKey, bytes]]:
        where, params = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
        rows = self._rows(
            f"SELECT {KEY_COLUMNS}, secret_hash FROM api_keys {where} "
            f"ORDER BY tenant, created_at, {self._KEY_ORDER}",
            params,
        )
        return [(key_of(row[:-1]), bytes(row[-1])) for row in rows]

    # -- re-embedding ---------------------------------------------------------------
    # New vectors are staged in a plain table, batch by batch, each batch
    # committed: an interrupted run resumes where it stopped, and memory use
    # stays one batch. The switch to them is one transaction at the end.

    def start_reembed(self, embedder_id: str) -> None:
        self._execute(self._STAGING_TABLE)
        # Vectors staged for another model by an earlier run are useless.
        self._execute("DELETE FROM reembed_staging WHERE embedder != ?", (embedder_id,))

    def unstaged_memories(self, limit: int) -> list[tuple[int, str]]:
        return [
            (int(seq), content)
            for seq, content in self._rows(
                "SELECT seq, content FROM memories "
                "WHERE seq > (SELECT coalesce(max(seq), 0) FROM reembed_staging) "
                "ORDER BY seq LIMIT ?",
                (limit,),
            )
        ]

    def stage_vectors(self, embedder_id: str, rows: list[tuple[int, np.ndarray]]) -> None:
        self._many(
            'INSERT INTO reembed_staging (seq, "window", embedder, embedding) '
            'VALUES (?, ?, ?, ?) ON CONFLICT (seq, "window") DO UPDATE '
            "SET embedder = excluded.embedder, embedding = excluded.embedding",
            [
                (seq, w, embedder_id, self._vector(vector))
                for seq, vectors in rows
                for w, vector in enumerate(vectors)
            ],
        )

    def _staged(self) -> list[tuple[int, str, str, int]]:
        """(seq, tenant, user_id, windows) of every memory with staged vectors, by seq."""
        return self._rows(
            "SELECT m.seq, m.tenant, m.user_id, count(*) FROM reembed_staging AS s "
            "JOIN memories AS m ON m.seq = s.seq GROUP BY m.seq ORDER BY m.seq"
        )

    def _switched(self, embedder_id: str, dimensions: int) -> None:
        """The end of :meth:`switch_to_staged`: the new model recorded, the staging gone."""
        self._set_meta("embedder", embedder_id)
        self._set_meta("dimensions", str(dimensions))
        self._execute("DROP TABLE reembed_staging")
        self._erased()  # the old vectors' bytes go (SQLite: at the next checkpoint)


def build_postings(store: SqlFrame) -> None:
    """Schema 5, on both stores: every memory's terms into ``memory_terms``, a user at a time."""
    users = store._rows("SELECT user_key, tenant, user_id FROM memory_users")
    for user_key, tenant, user_id in users:
        rows = store._rows(
            "SELECT seq, content FROM memories WHERE tenant = ? AND user_id = ?",
            (tenant, user_id),
        )
        found = postings.of([(user_key, seq, content) for seq, content in rows])
        store._many(postings.INSERT, found.rows)
        store._execute(
            "UPDATE memory_users SET terms = ? WHERE user_key = ?",
            (found.totals.get(user_key, 0), user_key),
        )

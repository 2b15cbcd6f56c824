"""What search reads, in the SQL both stores take alike (:class:`~..vector_source.VectorSource`).

Each store adds what differs: vectors (where they live), KNN, and which
memory a vector id belongs to.
"""

from __future__ import annotations

import typing as t

from ...models import Memory
from ..base import MEMORY_COLUMNS
from ..base import memory_of
from ..vector_source import ENTRY_COLUMNS
from ..vector_source import Entries
from ..vector_source import Entry
from ..vector_source import UserState
from .frame import SqlFrame


class SqlSearchReads(SqlFrame):
    """Counters, entries, postings and records, as search reads them."""

    def memories_by_seq(self, seqs: t.Sequence[int]) -> dict[int, Memory]:
        found = {}
        for condition, params in self._any("seq", [int(s) for s in seqs]):
            for row in self._rows(
                f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE {condition}", params
            ):
                found[row[0]] = memory_of(row[1:])
        return found

    def user_state(self, tenant: str, user_id: str) -> UserState | None:
        row = self._one(
            "SELECT count, max_vid, deletes, updates, generation, user_key, terms "
            "FROM memory_users WHERE tenant = ? AND user_id = ?",
            (tenant, user_id),
        )
        return UserState(*(int(v) for v in row)) if row else None

    def memories_if_current(
        self, tenant: str, user_id: str, state: UserState, seqs: t.Sequence[int]
    ) -> dict[int, Memory] | None:
        with self.read():
            if self.user_state(tenant, user_id) != state:
                return None
            return self.memories_by_seq(seqs)

    def entries(self, tenant: str, user_id: str, after_vid: int = 0) -> Entries:
        # Rows as they come, into columns: never a row object per memory at once.
        return Entries.of_rows(
            self._execute(
                f"SELECT {ENTRY_COLUMNS} FROM memories "
                "WHERE tenant = ? AND user_id = ? AND first_vid > ? ORDER BY first_vid",
                (tenant, user_id, after_vid),
            )
        )

    def _entries_in(
        self, tenant: str, user_id: str, column: str, values: t.Sequence[int]
    ) -> t.Iterator[Entry]:
        """The user's entries whose ``column`` is one of ``values``."""
        for condition, params in self._any(column, [int(v) for v in values]):
            for row in self._rows(
                f"SELECT {ENTRY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
                f"AND {condition}",
                (tenant, user_id, *params),
            ):
                yield Entry(*row)

    def entries_by_seq(self, tenant: str, user_id: str, seqs: t.Sequence[int]) -> dict[int, Entry]:
        return {e.seq: e for e in self._entries_in(tenant, user_id, "seq", seqs)}

    def postings(self, user_key: int, terms: t.Sequence[int]) -> list[tuple[int, int, int, int]]:
        found: list[tuple[int, int, int, int]] = []
        for condition, params in self._any("term", list(terms)):
            found += self._rows(
                f"SELECT term, seq, tf, dl FROM memory_terms WHERE user_key = ? AND {condition}",
                (user_key, *params),
            )
        return found

"""What every store's schema shares: its version, and what refuses a database.

Both stores number their schema alike (:data:`SCHEMA_VERSION`); a database
from a newer memsvc, or made for another embedding model, is refused with
:class:`StoreMismatch`; one that records the current version but lacks
part of it (a restore that failed half-way) with :class:`IncompleteSchema`.
"""

from __future__ import annotations

import typing as t

SCHEMA_VERSION = 9


class StoreMismatch(Exception):
    """The database was made for another embedding model or a newer memsvc."""


_ORDER = ["extension", "table", "sequence", "function", "index", "constraint"]


class IncompleteSchema(Exception):
    """The database records the current schema, but some of its parts are missing."""

    def __init__(self, missing: t.Iterable[tuple[str, str]]):
        #: (kind, name) of each missing part: ("table", "memory_vectors"), ("extension", "vector"),
        #: what everything else rests on first.
        self.missing = sorted(missing, key=lambda part: (_ORDER.index(part[0]), part[1]))
        super().__init__(
            "its schema is incomplete, missing "
            + ", ".join(f"{kind} {name}" for kind, name in self.missing)
            + "; restore it again, whole (see Backup and restore in docs/operations.md)"
        )


def check_recorded(recorded: tuple[str, int] | None, embedder_id: str, dimensions: int) -> None:
    """:class:`StoreMismatch` if the database records another model than the configured one."""
    if recorded is not None and recorded != (embedder_id, dimensions):
        raise StoreMismatch(
            f"the database holds vectors from {recorded[0]} ({recorded[1]} dimensions) but the "
            f"configured embedder is {embedder_id} ({dimensions} dimensions); switch back with "
            "MEMSVC_EMBEDDER / MEMSVC_LOCAL_MODEL / MEMSVC_EMBEDDING_MODEL / "
            "MEMSVC_EMBEDDING_DIMENSIONS, or run "
            "'memsvc reembed' to re-embed every memory with the configured one"
        )

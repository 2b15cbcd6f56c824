"""What every store's schema shares: its version, and what refuses a database.

Both stores number their schema alike (:data:`SCHEMA_VERSION`); a database
from a newer memsvc, or made for another embedding model, is refused with
:class:`StoreMismatch`.
"""

from __future__ import annotations

SCHEMA_VERSION = 5


class StoreMismatch(Exception):
    """The database was made for another embedding model or a newer memsvc."""


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

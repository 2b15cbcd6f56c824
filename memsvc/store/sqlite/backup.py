"""``memsvc backup``: a consistent copy of the live database, written safely.

SQLite's online backup copies every page in one step inside one read
transaction: a snapshot of one moment, taken without stopping writers (WAL
lets them go on). The copy is written beside its destination, checked,
flushed to disk, and only then renamed into place, owner-readable only.
"""

from __future__ import annotations

import os

from ..backend import BackupError
from .connection import Connection
from .connection import driver


def backup(conn: Connection, path: str) -> dict[str, int]:
    """Copy the database of ``conn`` to ``path``; returns counts and the size in bytes."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise BackupError(f"the folder {folder} does not exist")
    tmp = f"{path}.partial"
    for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
        if os.path.exists(leftover):
            os.remove(leftover)
    # Private from the first byte: the copy holds every memory and key hash.
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        dest = driver().connect(tmp, isolation_level=None)
        try:
            conn.backup(dest, pages=-1)
            (check,) = dest.execute("PRAGMA integrity_check").fetchone()
            if check != "ok":
                raise BackupError(f"the copy failed its integrity check: {check}")
            counts = {
                "memories": dest.execute("SELECT count(*) FROM memories").fetchone()[0],
                "api_keys": dest.execute("SELECT count(*) FROM api_keys").fetchone()[0],
            }
            dest.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
        finally:
            dest.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    counts["bytes"] = os.path.getsize(path)
    return counts

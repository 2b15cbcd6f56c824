"""What moving data in bulk reads and writes of a store: :class:`Bulk` and :class:`Reembedding`.

``memsvc export`` and ``memsvc import`` (:mod:`memsvc.services.transfer`)
read every memory with its vectors and history, and write memories and keys
as they were; ``memsvc reembed`` (:mod:`memsvc.services.reembedding`)
stages every memory's new vectors and switches to them at once. A store
implements these beside :class:`~.base.Store`.
"""

from __future__ import annotations

import abc
import contextlib
import typing as t

import numpy as np

from ..models import ApiKey
from ..models import Memory
from ..models import Version


class Bulk(abc.ABC):
    """Export and import: every memory with its vectors and history, keys with their hashes."""

    @abc.abstractmethod
    def count_memories(self, tenant: str | None, user_id: str | None, now: int) -> int:
        """Visible memories of a tenant, of a user, or all of them."""

    @abc.abstractmethod
    def all_memories(
        self, tenant: str | None, user_id: str | None, now: int
    ) -> t.Iterator[tuple[int, Memory, int, int]]:
        """Visible memories (of a tenant, of a user), oldest first, with seq and vector ids."""

    @abc.abstractmethod
    def exported(
        self, memories: t.Sequence[tuple[int, Memory, int, int]]
    ) -> list[tuple[np.ndarray, list[Version]]]:
        """Vectors and earlier versions of :meth:`all_memories`' rows, in their order."""

    @abc.abstractmethod
    def keys_with_hashes(self, tenant: str | None = None) -> list[tuple[ApiKey, bytes]]:
        """A tenant's keys (every key when ``tenant`` is None) with each one's secret hash,
        oldest first, for an export that moves them."""

    @abc.abstractmethod
    def existing_ids(self, ids: t.Sequence[str]) -> set[str]:
        """Which of these memory ids exist, in any tenant."""

    @abc.abstractmethod
    def insert_versions(self, seq: int, versions: t.Sequence[Version]) -> None:
        """Earlier versions of the memory ``seq`` (an import carries them over)."""

    @abc.abstractmethod
    def refresh_statistics(self) -> None:
        """After a bulk load: let the database plan queries for the data it now holds."""

    @contextlib.contextmanager
    def loading(self) -> t.Iterator[None]:
        """Around a bulk load: what makes many writes cheaper, for this connection, then back.

        What is stored is the same either way.
        """
        yield


class Reembedding(abc.ABC):
    """Every vector replaced by another model's.

    New vectors are staged batch by batch, each batch committed: an
    interrupted run resumes where it stopped, and memory use stays one
    batch. The switch to them is one transaction at the end.
    """

    @abc.abstractmethod
    def start_reembed(self, embedder_id: str) -> None: ...

    @abc.abstractmethod
    def unstaged_memories(self, limit: int) -> list[tuple[int, str]]:
        """(seq, content) of memories with no staged vectors yet, oldest first."""

    @abc.abstractmethod
    def stage_vectors(self, embedder_id: str, rows: list[tuple[int, np.ndarray]]) -> None:
        """Stage each memory's new windows' vectors: ``(seq, [windows, dims])``."""

    def has_unstaged(self) -> bool:
        return bool(self.unstaged_memories(1))

    @abc.abstractmethod
    def switch_to_staged(self, embedder_id: str, dimensions: int) -> None:
        """Replace every vector by its staged ones and record the new model."""

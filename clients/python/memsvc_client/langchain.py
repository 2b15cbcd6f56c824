"""memsvc for LangChain: :class:`MemsvcRetriever`, an end user's memories as a retriever.

``pip install 'memsvc-client[langchain]'`` (langchain-core). A thin adapter
over memsvc's own client: each retrieval is one :meth:`Memsvc.search`, which
searches as every memsvc client does (hybrid mode and the deployment's
recommended threshold unless told otherwise), scoped to one end user.
"""

from __future__ import annotations

import typing as t

from ._core import Mode
from ._extras import missing
from .aio import AsyncMemsvc
from .client import Memsvc
from .models import Memory

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.config import run_in_executor
    from pydantic import Field
except ModuleNotFoundError as e:
    missing(e, __name__, "langchain")

__all__ = ["MemsvcRetriever", "to_document"]


def to_document(memory: Memory) -> Document:
    """A memory as a LangChain document: its text, and its other fields in ``metadata``.

    ``metadata`` holds the memory in the wire's field names (``id``,
    ``userId``, ``createdAt``, ``similarity``, ``matchedBy``, ``explain``...,
    and the memory's own ``metadata`` under that key), so fields a later
    memsvc adds to memories arrive without a change here.
    """
    fields = memory.to_dict()
    del fields["content"]
    return Document(page_content=memory.content, metadata=fields, id=memory.id)


class MemsvcRetriever(BaseRetriever):
    """An end user's memories, most relevant first, as LangChain documents.

    ``client`` is a :class:`Memsvc` (``invoke`` calls it directly; ``ainvoke``
    in a worker thread, as LangChain runs sync retrievers) or an
    :class:`AsyncMemsvc` (``ainvoke`` only). Every search names ``user_id``:
    no other end user's memory can come back, and the API key keeps it to
    its tenant.
    """

    client: Memsvc | AsyncMemsvc
    """memsvc's client; the retriever never closes it."""
    user_id: str
    """The end user whose memories are searched."""
    k: int = Field(default=4, ge=1, le=100)
    """How many documents at most (memsvc's ``limit``, 1 to 100)."""
    mode: Mode | None = None
    """``"hybrid"``, ``"semantic"`` or ``"keyword"``; None: the client's default (hybrid)."""
    threshold: float | None = Field(default=None, ge=0, le=1)
    """Least cosine similarity; None: the deployment's recommended one (keyword: none)."""
    filter: dict[str, t.Any] | None = None
    """memsvc's metadata filter (``{"kind": "health"}``, ``{"year": {"gte": 2024}}``)."""

    def _documents(self, memories: list[Memory]) -> list[Document]:
        return [to_document(m) for m in memories]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if not isinstance(self.client, Memsvc):
            raise TypeError(
                "MemsvcRetriever with an AsyncMemsvc retrieves with ainvoke only; "
                "for invoke, give it a Memsvc"
            )
        found = self.client.search(
            self.user_id,
            query,
            limit=self.k,
            mode=self.mode,
            threshold=self.threshold,
            filter=self.filter,
        )
        return self._documents(found)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if isinstance(self.client, Memsvc):
            # A sync client blocks: LangChain's own way for sync retrievers.
            sync = run_manager.get_sync()
            return await run_in_executor(
                None, self._get_relevant_documents, query, run_manager=sync
            )
        found = await self.client.search(
            self.user_id,
            query,
            limit=self.k,
            mode=self.mode,
            threshold=self.threshold,
            filter=self.filter,
        )
        return self._documents(found)

"""memsvc for LlamaIndex: :class:`MemsvcRetriever` and :class:`MemsvcMemoryBlock`.

``pip install 'memsvc-client[llamaindex]'`` (llama-index-core). Thin adapters
over memsvc's own client, each scoped to one end user:

- :class:`MemsvcRetriever`, a ``llama_index.core.retrievers.BaseRetriever``
  whose nodes are the user's memories (``NodeWithScore``, the score being
  the memory's cosine similarity);
- :class:`MemsvcMemoryBlock`, a memory block for ``llama_index.core.memory.Memory``:
  the messages the short-term memory lets go become the user's memories,
  and the ones most related to the conversation come back into the prompt.
"""

from __future__ import annotations

import asyncio
import typing as t

from ._core import Mode
from ._extras import missing
from .aio import AsyncMemsvc
from .client import Memsvc
from .models import Memory

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.callbacks.base import CallbackManager
    from llama_index.core.constants import DEFAULT_SIMILARITY_TOP_K
    from llama_index.core.memory.memory import BaseMemoryBlock
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore
    from llama_index.core.schema import QueryBundle
    from llama_index.core.schema import TextNode
    from pydantic import Field
except ModuleNotFoundError as e:
    missing(e, __name__, "llamaindex")

__all__ = ["MemsvcMemoryBlock", "MemsvcRetriever", "to_node"]

#: The node metadata a model is shown with a memory's text (the rest is for code).
SHOWN = ("createdAt", "metadata")


def to_node(memory: Memory) -> NodeWithScore:
    """A memory as a LlamaIndex node: its id and text, its other fields in ``metadata``.

    ``metadata`` holds the memory in the wire's field names (``userId``,
    ``createdAt``, ``similarity``, ``matchedBy``..., the memory's own
    ``metadata`` under that key); the model sees ``createdAt`` and
    ``metadata`` with the text, and embeddings see the text alone.
    """
    fields = memory.to_dict()
    del fields["content"], fields["id"]
    node = TextNode(
        id_=memory.id,
        text=memory.content,
        metadata=fields,
        excluded_embed_metadata_keys=list(fields),
        excluded_llm_metadata_keys=[k for k in fields if k not in SHOWN],
    )
    return NodeWithScore(node=node, score=memory.similarity)


class MemsvcRetriever(BaseRetriever):
    """An end user's memories that best match a query, as ``NodeWithScore``\\ s.

    ``client`` is a :class:`Memsvc` (``retrieve``; ``aretrieve`` runs it in a
    worker thread) or an :class:`AsyncMemsvc` (``aretrieve`` only).
    ``similarity_top_k`` is memsvc's ``limit`` (1 to 100); ``mode`` and
    ``threshold`` None are the client's defaults (hybrid, the deployment's
    recommended threshold); ``filter`` is memsvc's metadata filter.
    """

    def __init__(
        self,
        client: Memsvc | AsyncMemsvc,
        user_id: str,
        *,
        similarity_top_k: int = DEFAULT_SIMILARITY_TOP_K,
        mode: Mode | None = None,
        threshold: float | None = None,
        filter: dict[str, t.Any] | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.client = client
        self.user_id = user_id
        self.similarity_top_k = similarity_top_k
        self.mode: Mode | None = mode
        self.threshold = threshold
        self.filter = filter

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if not isinstance(self.client, Memsvc):
            raise TypeError(
                "MemsvcRetriever with an AsyncMemsvc retrieves with aretrieve only; "
                "for retrieve, give it a Memsvc"
            )
        found = self.client.search(
            self.user_id,
            query_bundle.query_str,
            limit=self.similarity_top_k,
            mode=self.mode,
            threshold=self.threshold,
            filter=self.filter,
        )
        return [to_node(m) for m in found]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if isinstance(self.client, Memsvc):
            return await asyncio.to_thread(self._retrieve, query_bundle)
        found = await self.client.search(
            self.user_id,
            query_bundle.query_str,
            limit=self.similarity_top_k,
            mode=self.mode,
            threshold=self.threshold,
            filter=self.filter,
        )
        return [to_node(m) for m in found]


def _text(message: ChatMessage) -> str:
    return (message.content or "").strip()


class MemsvcMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory for ``Memory(memory_blocks=[...])``: an end user's memories in memsvc.

    Putting: each message the short-term memory lets go (of a role in
    ``roles``, with text) becomes a memory of ``user_id``, its metadata
    ``{"role", "sessionId"}`` and this block's ``metadata``; an identical one
    is stored once. Getting: the last message (the one being answered) is the
    query, and the ``similarity_top_k`` memories that best match it come back
    as lines of text, best first. ``retrieval_context_window`` folds more of
    the last messages into the query; a longer query scores lower against
    each memory, so pair it with a lower ``threshold``.
    """

    name: str = Field(default="memories", description="The name of the memory block.")
    description: str | None = Field(
        default="What the user said in earlier conversations, most related first.",
        description="A description of the memory block.",
    )
    client: Memsvc | AsyncMemsvc = Field(description="memsvc's client (never closed here).")
    user_id: str = Field(description="The end user whose memories these are.")
    similarity_top_k: int = Field(default=5, ge=1, le=100, description="Memories at most.")
    retrieval_context_window: int = Field(
        default=1, ge=1, description="How many of the last messages make the query."
    )
    mode: Mode | None = Field(default=None, description="None: the client's default.")
    threshold: float | None = Field(
        default=None, ge=0, le=1, description="None: the deployment's recommended one."
    )
    filter: dict[str, t.Any] | None = Field(default=None, description="memsvc's filter.")
    roles: tuple[str, ...] = Field(
        default=("user", "assistant"), description="The roles of the messages remembered."
    )
    metadata: dict[str, t.Any] = Field(
        default_factory=dict, description="Stored with every memory this block adds."
    )

    async def _search(self, query: str) -> list[Memory]:
        if isinstance(self.client, AsyncMemsvc):
            return await self.client.search(
                self.user_id,
                query,
                limit=self.similarity_top_k,
                mode=self.mode,
                threshold=self.threshold,
                filter=self.filter,
            )
        client = self.client
        return await asyncio.to_thread(
            lambda: client.search(
                self.user_id,
                query,
                limit=self.similarity_top_k,
                mode=self.mode,
                threshold=self.threshold,
                filter=self.filter,
            )
        )

    async def _add(self, content: str, metadata: dict[str, t.Any]) -> Memory:
        # dedupe: a message put twice (a retry) is one memory.
        if isinstance(self.client, AsyncMemsvc):
            return await self.client.add(self.user_id, content, metadata=metadata, dedupe=True)
        client = self.client
        return await asyncio.to_thread(
            lambda: client.add(self.user_id, content, metadata=metadata, dedupe=True)
        )

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: t.Any) -> str:
        recent = (messages or [])[-self.retrieval_context_window :]
        query = "\n".join(text for text in map(_text, recent) if text)
        if not query:
            return ""
        return "\n".join(f"- {m.content}" for m in await self._search(query))

    async def _aput(self, messages: list[ChatMessage]) -> None:
        for message in messages:
            role = message.role.value
            text = _text(message)
            if role not in self.roles or not text:
                continue
            metadata = {**self.metadata, "role": role}
            session = message.additional_kwargs.get("session_id")
            if session is not None:
                metadata["sessionId"] = session
            await self._add(text, metadata)

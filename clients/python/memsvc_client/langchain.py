"""memsvc for LangChain: an end user's memories as a retriever, a conversation as a chat history.

``pip install 'memsvc-client[langchain]'`` (langchain-core). Thin adapters
over memsvc's own client, each scoped to one end user:

- :class:`MemsvcRetriever`: each retrieval is one :meth:`Memsvc.search`,
  which searches as every memsvc client does (hybrid mode and the
  deployment's recommended threshold unless told otherwise).
- :class:`MemsvcChatMessageHistory`: one session of the user's, stored with
  ``memory.ingest`` (one all-or-none call per ``add_messages``) and read
  back with ``memory.session`` in position order.
"""

from __future__ import annotations

import contextlib
import typing as t
import uuid

from ._core import Message
from ._core import Mode
from ._extras import missing
from .aio import AsyncMemsvc
from .client import Memsvc
from .errors import NotFound
from .models import Memory

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage
    from langchain_core.messages import BaseMessage
    from langchain_core.messages import HumanMessage
    from langchain_core.messages import SystemMessage
    from langchain_core.messages import ToolMessage
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.config import run_in_executor
    from pydantic import Field
except ModuleNotFoundError as e:
    missing(e, __name__, "langchain")

__all__ = ["MemsvcChatMessageHistory", "MemsvcRetriever", "to_document", "to_message"]


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


Role = t.Literal["user", "assistant", "system", "tool"]
#: LangChain's message classes and memsvc's roles, both ways. Subclasses
#: (``AIMessageChunk``...) take their class's role.
ROLES: tuple[tuple[type[BaseMessage], Role], ...] = (
    (HumanMessage, "user"),
    (AIMessage, "assistant"),
    (SystemMessage, "system"),
    (ToolMessage, "tool"),
)
#: Messages read per memory.session call by default: memsvc's most.
PAGE = 1000


class MemsvcChatMessageHistory(BaseChatMessageHistory):
    """One conversation of an end user, kept in memsvc: a LangChain chat message history.

    ``add_messages`` stores the messages with one ``memory.ingest`` of
    ``user_id``'s session ``session_id`` (all or none); ``messages`` reads
    the session back with ``memory.session``, ``page_size`` messages a call,
    in the order they were added. Each message is stored with its role
    (human ``user``, AI ``assistant``, system ``system``, tool ``tool``),
    its text, its ``name`` (memsvc's ``speaker``) and its ``id`` (memsvc's
    ``messageId``; a message without one is given a UUID, set on the
    message itself), so sending the same messages again stores nothing
    twice. Tool calls, ``tool_call_id`` and the other fields LangChain
    attaches are not stored (docs/clients.md says what comes back).

    ``client`` is a :class:`Memsvc` (the sync methods call it; the async
    ones run them in a worker thread, LangChain's default) or an
    :class:`AsyncMemsvc` (the async methods only). The history never closes it.
    """

    def __init__(
        self,
        *,
        client: Memsvc | AsyncMemsvc,
        user_id: str,
        session_id: str,
        page_size: int = PAGE,
    ) -> None:
        if not isinstance(client, Memsvc | AsyncMemsvc):
            raise TypeError(
                f"client must be a Memsvc or an AsyncMemsvc, not {type(client).__name__}"
            )
        if not 1 <= page_size <= PAGE:
            raise ValueError(f"page_size must be 1 to {PAGE}, not {page_size}")
        super().__init__()
        self.client = client
        """memsvc's client; the history never closes it."""
        self.user_id = user_id
        """The end user whose conversation this is."""
        self.session_id = session_id
        """The session, among ``user_id``'s: another user's of the same id is another one."""
        self.page_size = page_size
        """Messages read per ``memory.session`` call (1 to 1000)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(user_id={self.user_id!r}, session_id={self.session_id!r})"

    def _sync(self, method: str) -> Memsvc:
        if isinstance(self.client, Memsvc):
            return self.client
        raise TypeError(
            "MemsvcChatMessageHistory with an AsyncMemsvc has the async methods only "
            f"(aget_messages, aadd_messages, aclear); for {method}, give it a Memsvc"
        )

    # BaseChatMessageHistory declares ``messages`` as an attribute and says a
    # property may stand for it (as here: it reads memsvc each time).
    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages in the order they were added; ``[]`` before the first."""
        client = self._sync("messages")
        try:
            found = list(
                client.iter_session(self.user_id, self.session_id, page_size=self.page_size)
            )
        except NotFound:
            # No such session (yet), or its last message was deleted while it was read.
            return []
        return [to_message(m) for m in found]

    async def aget_messages(self) -> list[BaseMessage]:
        """The session's messages in the order they were added; ``[]`` before the first."""
        if isinstance(self.client, Memsvc):
            return await super().aget_messages()
        pages = self.client.iter_session(self.user_id, self.session_id, page_size=self.page_size)
        try:
            found = [m async for m in pages]
        except NotFound:
            return []
        return [to_message(m) for m in found]

    def add_messages(self, messages: t.Sequence[BaseMessage]) -> None:
        """Store ``messages`` at the end of the session, all or none, in one call.

        A message that is not a human, AI, system or tool message, or whose
        content holds a block that is not text, is refused before anything
        is sent.
        """
        client = self._sync("add_messages")
        sent = _to_wire(messages)
        if sent:
            client.ingest(self.user_id, sent, session_id=self.session_id)

    async def aadd_messages(self, messages: t.Sequence[BaseMessage]) -> None:
        """Store ``messages`` at the end of the session, all or none, in one call."""
        if isinstance(self.client, Memsvc):
            await super().aadd_messages(messages)
            return
        sent = _to_wire(messages)
        if sent:
            await self.client.ingest(self.user_id, sent, session_id=self.session_id)

    def clear(self) -> None:
        """Delete every message of the session: one ``memory.delete`` each, not atomic.

        memsvc has no call that deletes a session: the messages are read,
        then deleted one by one. A failure part way leaves the rest; calling
        ``clear`` again finishes. Messages added meanwhile may stay.
        """
        client = self._sync("clear")
        try:
            ids = [
                m.id
                for m in client.iter_session(
                    self.user_id, self.session_id, page_size=self.page_size
                )
            ]
        except NotFound:
            return
        for memory_id in ids:
            with contextlib.suppress(NotFound):  # already gone: deleted meanwhile
                client.delete(memory_id, user_id=self.user_id)

    async def aclear(self) -> None:
        """Delete every message of the session: one ``memory.delete`` each, not atomic."""
        if isinstance(self.client, Memsvc):
            await super().aclear()
            return
        pages = self.client.iter_session(self.user_id, self.session_id, page_size=self.page_size)
        try:
            ids = [m.id async for m in pages]
        except NotFound:
            return
        for memory_id in ids:
            with contextlib.suppress(NotFound):
                await self.client.delete(memory_id, user_id=self.user_id)


def _to_wire(messages: t.Sequence[BaseMessage]) -> list[Message]:
    """LangChain messages as memsvc's (role, text, name, id), checked before any is changed.

    A message without an ``id`` is given one (a UUID), on the message
    itself: the application's messages and memsvc's then share their ids,
    and adding the same messages again stores nothing twice.
    """
    checked = [
        (message, _role(message, i), _text(message, i)) for i, message in enumerate(messages)
    ]
    out: list[Message] = []
    for message, role, text in checked:
        if message.id is None:
            message.id = str(uuid.uuid4())
        item: Message = {"role": role, "content": text, "id": message.id}
        if message.name is not None:
            item["name"] = message.name
        out.append(item)
    return out


def to_message(memory: Memory) -> BaseMessage:
    """A message of a session (``Memsvc.session``) as LangChain's message of its role.

    Its text, its ``speaker`` as ``name``, its ``messageId`` as ``id``. memsvc
    does not keep a tool message's ``tool_call_id``: it comes back ``""``.
    """
    fields: dict[str, t.Any] = {"content": memory.content, "id": memory.message_id}
    if memory.speaker is not None:
        fields["name"] = memory.speaker
    if memory.role == "tool":
        return ToolMessage(tool_call_id="", **fields)
    for cls, role in ROLES:
        if role == memory.role:
            return cls(**fields)
    raise ValueError(f"memory {memory.id} is not a message of a session (role {memory.role!r})")


def _role(message: BaseMessage, index: int) -> Role:
    for cls, role in ROLES:
        if isinstance(message, cls):
            return role
    raise TypeError(
        f"messages[{index}]: memsvc stores human, AI, system and tool messages, "
        f"not {type(message).__name__}"
    )


def _text(message: BaseMessage, index: int) -> str:
    """The message's text: its content, or its text blocks joined as ``message.text`` joins them.

    A block that is not text (an image, a tool use, reasoning) would be lost:
    refused.
    """
    if isinstance(message.content, str):
        return message.content
    for block in message.content:
        if isinstance(block, str):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            continue
        raise ValueError(
            f"messages[{index}]: memsvc stores a message's text, and this "
            f"{type(message).__name__} holds a {block.get('type')!r} block; "
            "to store its text alone, add a copy with content=message.text"
        )
    return str(message.text)

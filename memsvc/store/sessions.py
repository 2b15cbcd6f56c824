"""What conversations ask of a store: :class:`Conversations`.

A message is a memory with its session, role, speaker and position; a
store keeps each session's place in the conversation and finds a session's
messages around a search's hits. The SQL both stores share is
:class:`~.conversations.ConversationSql`.
"""

from __future__ import annotations

import abc
import typing as t

from ..models import Memory
from ..models import Session


class Conversations(abc.ABC):
    """A user's sessions of messages: positions, pages, messages by id and around a place."""

    @abc.abstractmethod
    def next_position(self, tenant: str, user_id: str, session_id: str) -> int:
        """The position the session's next message gets (0 for a new session).

        Inside write(): the user's other writers wait until this transaction ends.
        """

    @abc.abstractmethod
    def messages_by_id(
        self, tenant: str, user_id: str, session_id: str, message_ids: t.Sequence[str]
    ) -> dict[str, tuple[int, Memory]]:
        """The session's messages with these caller ids, with their seqs, expired ones too."""

    @abc.abstractmethod
    def sessions(
        self, tenant: str, user_id: str, now: int, limit: int, after: str | None = None
    ) -> list[Session] | None:
        """A page of the user's sessions, latest message first; None if ``after`` is no session."""

    @abc.abstractmethod
    def session_messages(
        self,
        tenant: str,
        user_id: str,
        session_id: str,
        now: int,
        limit: int,
        after: int | None = None,
    ) -> list[Memory] | None:
        """A page of a session's visible messages by position; None if it is no session."""

    @abc.abstractmethod
    def neighbours(
        self,
        tenant: str,
        user_id: str,
        anchors: t.Sequence[tuple[str, int]],
        n: int,
        now: int,
    ) -> dict[tuple[str, int], tuple[list[Memory], list[Memory]]]:
        """Up to ``n`` visible messages before and after each ``(session_id, position)``."""

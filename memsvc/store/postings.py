"""The keyword index's rows, the same on every store.

``memory_terms`` holds one row per (user, term, memory): how often the term
occurs in the memory (``tf``) and the memory's length in terms (``dl``);
``memory_users.terms`` the total length of the user's memories. That is all
BM25 needs, from the user's own memories alone. Terms are hashes
(:mod:`memsvc.terms`); a memory's rows are found again from its text when it
changes or goes.
"""

from __future__ import annotations

import dataclasses
import typing as t

from .. import terms

#: Written with ``?`` placeholders, as every shared statement (:mod:`.sql`).
INSERT = "INSERT INTO memory_terms (user_key, term, seq, tf, dl) VALUES (?, ?, ?, ?, ?)"
DELETE = "DELETE FROM memory_terms WHERE user_key = ? AND term = ? AND seq = ?"


@dataclasses.dataclass
class Postings:
    #: ``(user_key, term, seq, tf, dl)``, in the index's order.
    rows: list[tuple[int, int, int, int, int]]
    #: Terms added per user.
    totals: dict[int, int]


def of(memories: t.Iterable[tuple[int, int, str]]) -> Postings:
    """The index rows of ``(user_key, seq, content)`` memories, in the index's order.

    Sorted a user at a time: an import's batch holds thousands of users with
    a few memories each, and sorting each user's few dozen rows costs a
    third of sorting them all together.
    """
    by_user: dict[int, list[tuple[int, int, int, int, int]]] = {}
    totals: dict[int, int] = {}
    for user_key, seq, content in memories:
        counted, length = terms.counts(content)
        rows = by_user.get(user_key)
        if rows is None:
            rows = by_user[user_key] = []
        rows.extend((user_key, term, seq, tf, length) for term, tf in counted.items())
        totals[user_key] = totals.get(user_key, 0) + length
    ordered: list[tuple[int, int, int, int, int]] = []
    for user_key in sorted(by_user):
        rows = by_user[user_key]
        rows.sort()
        ordered.extend(rows)
    return Postings(ordered, totals)


def keys_of(user_key: int, seq: int, content: str) -> tuple[list[tuple[int, int, int]], int]:
    """The primary keys of one memory's rows, for :data:`DELETE`, and its length."""
    counted, length = terms.counts(content)
    return [(user_key, term, seq) for term in counted], length

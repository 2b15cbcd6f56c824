"""The memories a user's snapshot answered searches with, kept while the user is unchanged.

A warm search whose winners were all answered before, as of the same
counters, reads the counters alone (:mod:`.semantic`). What is kept is
counted by walking it (:func:`record_bytes`), so the search cache's figure
is what the worker holds.
"""

from __future__ import annotations

import sys
import typing as t

from ..models import Memory


class Records:
    """Memories a snapshot's searches answered with, read as of its state, by seq.

    The user's counters unchanged, none of their memories changed: a
    search that finds them unchanged answers with these instead of reading
    the same rows again. Bounded; a new state starts a new snapshot, and
    with it an empty set. A memory whose metadata has more than
    :data:`MAX_NODES` values is not kept (read again when answered): what
    one holds is counted by walking it, and the walk is bounded.
    """

    MAX_MEMORIES = 1024
    MAX_BYTES = 2**20
    MAX_NODES = 512

    __slots__ = ("found", "nbytes")

    def __init__(self) -> None:
        self.found: dict[int, Memory] = {}
        self.nbytes = 0

    def add(self, found: t.Mapping[int, Memory]) -> bool:
        """Keep these (read as of the snapshot's state) while there is room; whether any was."""
        kept = False
        for seq, memory in found.items():
            if len(self.found) >= self.MAX_MEMORIES or self.nbytes >= self.MAX_BYTES:
                break
            if seq not in self.found:
                size = record_bytes(memory, self.MAX_NODES)
                if size is None:
                    continue
                self.found[seq] = memory
                self.nbytes += size
                kept = True
        return kept


#: What a memory the API answered keeps beside it: its JSON text's entry in
#: :mod:`memsvc.wire`'s table (a weak reference, its callback, a tuple, a slot).
_ANSWERED_BYTES = 300


def record_bytes(memory: Memory, max_nodes: int) -> int | None:
    """What a kept memory holds: its object and strings, its metadata's objects, and the JSON
    text of it the API keeps while it lives; None if its metadata has over ``max_nodes`` values."""
    metadata = held_bytes(memory.metadata, max_nodes)
    if metadata is None:
        return None
    held, text = metadata
    strings = (memory.id, memory.tenant, memory.user_id, memory.content)
    # Its JSON text: the content, the metadata, and about 250 bytes of ids and times.
    answer = sys.getsizeof("") + len(memory.content) + text + 250
    return (
        sys.getsizeof(memory) + sum(sys.getsizeof(s) for s in strings) + held + answer
        + _ANSWERED_BYTES
    )  # fmt: skip


def held_bytes(value: t.Any, max_nodes: int) -> tuple[int, int] | None:
    """What a parsed JSON value holds (its objects) and about how long its JSON text is;
    None if it has more than ``max_nodes`` values."""
    held = text = 0
    stack = [value]
    nodes = 0
    while stack:
        node = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return None
        if isinstance(node, dict):
            held += sys.getsizeof(node)
            text += 2 + len(node)
            for key, item in node.items():
                held += sys.getsizeof(key)
                text += len(key) + 3
                stack.append(item)
        elif isinstance(node, list):
            held += sys.getsizeof(node)
            text += 2 + len(node)
            stack.extend(node)
        elif isinstance(node, str):
            held += sys.getsizeof(node)
            text += len(node) + 2
        elif node is None or isinstance(node, bool):
            text += 5
        else:  # a number
            held += sys.getsizeof(node)
            text += 12
    return held, text

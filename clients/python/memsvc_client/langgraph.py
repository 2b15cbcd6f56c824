"""memsvc for LangGraph: :class:`MemsvcStore`, LangGraph's long-term memory store on memsvc.

``pip install 'memsvc-client[langgraph]'``. A ``langgraph.store.base.BaseStore``
over memsvc's own client, so a graph's ``store`` (and LangMem, which keeps
its memories in it) lives in memsvc. How LangGraph's items become memsvc's
memories:

- **Namespace -> end user.** ``("memories", "alice")`` is the end user
  ``"memories.alice"``: the labels joined with ``.``, which LangGraph forbids
  inside a label, so the mapping goes both ways.
- **Key and value -> metadata.** An item is one memory of that user whose
  metadata is ``{"langgraph": {"key": key}, "value": value}``. The value
  comes back from ``metadata["value"]`` exactly as put (JSON).
- **What is searched -> content.** The memory's text is what LangGraph's
  index ``fields`` select from the value (default ``["$"]``, the whole value
  as JSON; LangMem's items read best with ``fields=["content"]``), joined by
  newlines; memsvc embeds it and keeps it in its keyword index. An item put
  with ``index=False``, or whose fields hold no text, is stored with the
  value's JSON as its text and left out of searches with a ``query``.

``docs/clients.md`` states the costs and limits of the mapping.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import typing as t

from ._core import Mode
from ._extras import missing
from .client import Memsvc
from .errors import NotFound
from .models import Memory

try:
    from langgraph.store.base import BaseStore
    from langgraph.store.base import GetOp
    from langgraph.store.base import InvalidNamespaceError
    from langgraph.store.base import Item
    from langgraph.store.base import ListNamespacesOp
    from langgraph.store.base import MatchCondition
    from langgraph.store.base import Op
    from langgraph.store.base import PutOp
    from langgraph.store.base import Result
    from langgraph.store.base import SearchItem
    from langgraph.store.base import SearchOp
    from langgraph.store.base import get_text_at_path
    from langgraph.store.base import validate_op_namespace
except ModuleNotFoundError as e:
    missing(e, __name__, "langgraph")

__all__ = ["MemsvcStore"]

#: The metadata key holding an item's key (and ``"index": false``).
MARK = "langgraph"
#: The metadata key holding an item's value.
VALUE = "value"
#: LangGraph's filter operators and memsvc's.
OPERATORS = {
    "$eq": "eq",
    "$ne": "ne",
    "$gt": "gt",
    "$gte": "gte",
    "$lt": "lt",
    "$lte": "lte",
}
#: The most results one memory.search returns: offset + limit of a query search.
MAX_SEARCH = 100
#: Memories read per memory.getAll, end users per memory.users (memsvc's most).
PAGE = 1000


def user_of(namespace: tuple[str, ...]) -> str:
    """The end user holding a namespace's items: its labels joined with ``.``."""
    return ".".join(namespace)


def namespace_of(user_id: str) -> tuple[str, ...]:
    """The namespace of an end user."""
    return tuple(user_id.split("."))


def memsvc_filter(condition: t.Mapping[str, t.Any], path: str = VALUE) -> dict[str, t.Any]:
    """A LangGraph filter on values as memsvc's filter on the metadata holding them.

    ``{"kind": "note", "score": {"$gte": 3}, "author": {"name": "Ann"}}`` is
    ``{"value.kind": "note", "value.score": {"gte": 3}, "value.author.name": "Ann"}``.
    What memsvc cannot express is a ValueError, before anything is sent.
    """
    out: dict[str, t.Any] = {}
    for key, wanted in condition.items():
        if "." in key:
            raise ValueError(f"filter key {key!r}: memsvc cannot address a key holding '.'")
        where = f"{path}.{key}"
        if isinstance(wanted, t.Mapping) and any(k.startswith("$") for k in wanted):
            if len(wanted) != 1:
                raise ValueError(
                    f"filter key {key!r}: memsvc takes one operator per key, not {sorted(wanted)}"
                )
            ((operator, operand),) = wanted.items()
            if operator not in OPERATORS:
                raise ValueError(f"Unsupported operator: {operator}")
            out[where] = {OPERATORS[operator]: operand}
        elif isinstance(wanted, t.Mapping):
            out.update(memsvc_filter(wanted, where))  # nested keys, as LangGraph compares them
        else:
            out[where] = wanted  # equality; a list equals a list, whole and in order
    return out


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace starts (or ends) with the condition's path; ``*`` is any label."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    labels = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p == "*" or p == label for p, label in zip(path, labels, strict=True))


class MemsvcStore(BaseStore):
    """LangGraph's ``BaseStore`` on memsvc: items are memories, namespaces end users.

    ``client`` is a :class:`Memsvc`: ``batch`` calls it directly and
    ``abatch`` in a worker thread, as LangGraph's own synchronous stores do.
    ``fields`` are the paths of a value whose text is embedded and searched
    (LangGraph's ``IndexConfig["fields"]``; default ``["$"]``, the whole
    value). ``mode`` and ``threshold`` are those of the store's searches with
    a query (None: the client's defaults, hybrid and the deployment's
    recommended threshold; ``threshold=0`` returns the ``limit`` best
    whatever their similarity, as LangGraph's in-memory store does).

    The operations of a batch run in order, each seeing the ones before.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        client: Memsvc,
        *,
        fields: t.Sequence[str] | None = None,
        mode: Mode | None = None,
        threshold: float | None = None,
    ) -> None:
        if not isinstance(client, Memsvc):
            raise TypeError(
                "MemsvcStore takes a Memsvc (abatch runs it in a worker thread), "
                f"not {type(client).__name__}"
            )
        self.client = client
        self.fields = list(fields) if fields is not None else ["$"]
        self.mode: Mode | None = mode
        self.threshold = threshold

    def __repr__(self) -> str:
        return f"MemsvcStore({self.client!r})"

    # -- BaseStore ---------------------------------------------------------------

    def batch(self, ops: t.Iterable[Op]) -> list[Result]:
        ops = list(ops)
        for op in ops:  # every op checked before any runs
            validate_op_namespace(op)
            if isinstance(op, PutOp) and not op.namespace:
                raise InvalidNamespaceError("Namespace cannot be empty.")
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return results

    async def abatch(self, ops: t.Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, ops)

    # -- operations ----------------------------------------------------------------

    def _find(self, user_id: str, key: str) -> list[Memory]:
        """The memories holding an item, newest first (more than one only after racing puts)."""
        mark = {f"{MARK}.key": key}
        return self.client.get_all(user_id, limit=MAX_SEARCH, filter=mark)

    def _get(self, op: GetOp) -> Item | None:
        if not op.namespace:
            return None  # no end user has the empty name
        found = self._find(user_of(op.namespace), op.key)
        return self._item(found[0]) if found else None

    def _put(self, op: PutOp) -> None:
        user = user_of(op.namespace)
        found = self._find(user, op.key)
        if op.value is None:
            self._delete(found, user)
            return
        value = dict(op.value)
        content, indexed = self._text(value, op.index)
        mark: dict[str, t.Any] = {"key": op.key}
        if not indexed:
            mark["index"] = False
        metadata = {MARK: mark, VALUE: value}
        expires = None
        if op.ttl is not None:
            now = datetime.datetime.now(datetime.UTC)
            expires = now + datetime.timedelta(minutes=op.ttl)
        if found:
            try:
                self.client.update(
                    found[0].id,
                    content=content,
                    metadata=metadata,
                    expires_at=expires,
                    user_id=user,
                )
            except NotFound:  # deleted or expired since it was found
                pass
            else:
                self._delete(found[1:], user)  # what racing puts of a new key left
                return
        self.client.add(user, content, metadata=metadata, expires_at=expires)

    def _delete(self, memories: list[Memory], user_id: str) -> None:
        for memory in memories:
            try:
                self.client.delete(memory.id, user_id=user_id)
            except NotFound:
                pass  # deleted since: what was asked

    def _text(
        self, value: dict[str, t.Any], index: t.Literal[False] | list[str] | None
    ) -> tuple[str, bool]:
        """The memory's text for a value, and whether searches with a query may find it."""
        if index is not False:
            paths = self.fields if index is None else index
            texts = [text for path in paths for text in get_text_at_path(value, path)]
            text = "\n".join(text for text in texts if text.strip())
            if text:
                return text, True
        # memsvc stores text: what no query is to find keeps its value's JSON.
        return json.dumps(value, sort_keys=True, ensure_ascii=False), False

    def _users(self, prefix: tuple[str, ...]) -> list[str]:
        """The end users whose namespace is ``prefix`` or starts with it."""
        joined = user_of(prefix)
        users = [u.user_id for u in self.client.iter_users(page_size=PAGE, prefix=joined or None)]
        if not prefix:
            return users
        return [u for u in users if u == joined or u.startswith(joined + ".")]

    def _search(self, op: SearchOp) -> list[SearchItem]:
        wanted = op.offset + op.limit
        if op.limit <= 0:
            return []
        conditions = memsvc_filter(op.filter or {})
        found: list[Memory] = []
        if op.query:
            if wanted > MAX_SEARCH:
                raise ValueError(
                    f"offset + limit is {wanted}: a search with a query on memsvc "
                    f"returns at most {MAX_SEARCH}"
                )
            conditions[f"{MARK}.index"] = {"ne": False}
            for user in self._users(op.namespace_prefix):
                found += self.client.search(
                    user,
                    op.query,
                    limit=wanted,
                    mode=self.mode,
                    threshold=self.threshold,
                    filter=conditions,
                    explain=True,
                )
            # Namespaces' results merged by the score each was ranked by.
            found.sort(key=lambda m: m.explain.score if m.explain else 0.0, reverse=True)
        else:
            conditions[f"{MARK}.key"] = {"exists": True}
            for user in self._users(op.namespace_prefix):
                page = self.client.get_all(user, limit=min(wanted, PAGE), filter=conditions)
                found += page
                while len(page) == PAGE and len(found) < wanted:
                    page = self.client.get_all(
                        user, limit=PAGE, cursor=page[-1].id, filter=conditions
                    )
                    found += page
            found.sort(key=lambda m: m.created_at, reverse=True)
        return [self._item(m, search=True) for m in found[op.offset : wanted]]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        # memory.users narrows by the literal labels a prefix condition starts with.
        literal: tuple[str, ...] = ()
        for condition in conditions:
            if condition.match_type == "prefix":
                for label in condition.path:
                    if label == "*":
                        break
                    literal += (label,)
                break
        namespaces = [namespace_of(u) for u in self._users(literal)]
        namespaces = [ns for ns in namespaces if all(_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        else:
            namespaces = sorted(namespaces)
        return namespaces[op.offset : op.offset + op.limit]

    # -- items ---------------------------------------------------------------------

    @t.overload
    def _item(self, memory: Memory) -> Item: ...
    @t.overload
    def _item(self, memory: Memory, *, search: t.Literal[True]) -> SearchItem: ...

    def _item(self, memory: Memory, *, search: bool = False) -> Item:
        """The LangGraph item a memory holds (a search result with its score)."""
        namespace = namespace_of(memory.user_id)
        key = str(memory.metadata[MARK]["key"])
        value = memory.metadata.get(VALUE) or {}
        if not search:
            return Item(
                value=value,
                key=key,
                namespace=namespace,
                created_at=memory.created_at,
                updated_at=memory.updated_at,
            )
        return SearchItem(
            namespace,
            key,
            value,
            memory.created_at,
            memory.updated_at,
            score=memory.explain.score if memory.explain else None,
        )

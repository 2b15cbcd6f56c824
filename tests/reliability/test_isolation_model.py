"""Tenant and user isolation, checked against a model over random operation sequences.

Three tenants with the same three user names, several API keys each (some
revoked along the way through ``keys.revoke`` with the tenant's JWT), and a
random mix of every memory and key operation (updates, history, listing
the tenant's end users, erasing a user, ingesting conversations and reading
their sessions back included), through Flask's test client. After each
step the answer must be exactly what a plain in-memory
model says: no read, search, update, delete, erasure or key operation ever
reaches across a tenant or a user, revoked keys get 401, another tenant's
memory is a 404, another tenant's key is a 401 for ``keys.revoke``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import tempfile
import typing as t
import uuid

import pytest
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule
from hypothesis.stateful import run_state_machine_as_test

from memsvc import create_app
from memsvc.api.context import store
from memsvc.tokens import LocalVerifier
from tests.support import figures
from tests.support import postgres
from tests.support.helpers import HashEmbedder
from tests.support.helpers import assert_error_item

JWT_SECRET = "m" * 40
TENANTS = ("tenant-0", "tenant-1", "tenant-2")
USERS = ("user-0", "user-1", "user-2")
SESSIONS = ("session-0", "session-1")
MESSAGE_IDS = ("a", "b", "c", None)
WORDS = st.text(alphabet="abcdefghij klmnop", min_size=1, max_size=12)


@dataclasses.dataclass
class Key:
    id: str
    tenant: str
    secret: str
    revoked: bool = False


@dataclasses.dataclass
class Memory:
    id: str
    tenant: str
    user: str
    content: str
    live: bool = True
    #: Earlier contents, oldest first.
    versions: list[str] = dataclasses.field(default_factory=list)
    #: A message's session, position and id.
    session: str | None = None
    position: int | None = None
    message_id: str | None = None


class IsolationMachine(RuleBasedStateMachine):
    """memsvc beside a model of what each tenant's keys and memories are."""

    search_cache_mb = 256
    #: 0: every user's vectors in a snapshot file shared by the workers.
    shared_min_kb = 4096
    store_kind = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory(prefix="memsvc-isolation-")
        root = self._tmp.name
        self.database = (
            postgres.fresh_database("isolation")
            if self.store_kind == "postgres"
            else f"{root}/memsvc.sqlite3"
        )
        self.app = create_app(
            {
                "TESTING": True,
                "PROPAGATE_EXCEPTIONS": False,
                "DATABASE": self.database,
                "LIMITS_DIR": f"{root}/limits",
                "RATE_LIMIT_PER_MINUTE": 0,
                "CONCURRENCY_LIMIT": 0,
                "KEYS_RATE_LIMIT_PER_MINUTE": 0,
                "MAX_KEYS_PER_TENANT": 0,
                "JWT_SECRET": JWT_SECRET,
                "SEARCH_CACHE_MB": self.search_cache_mb,
                "SEARCH_SHARED_MIN_KB": self.shared_min_kb,
            },
            instance_path=f"{root}/instance",
        )
        self.app.extensions["memsvc"].embedder = HashEmbedder(384, "local:all-MiniLM-L6-v2")
        self.client = self.app.test_client()
        verifier = LocalVerifier(JWT_SECRET)
        self.tokens = {tenant: verifier.mint(tenant) for tenant in TENANTS}
        self.keys: list[Key] = []
        self.memories: list[Memory] = []
        self.next_position: dict[tuple[str, str, str], int] = {}
        self.added = 0
        for tenant in TENANTS:
            self._create_key(tenant, "first")

    def teardown(self) -> None:
        self.app.extensions["memsvc"].close()
        if self.store_kind == "postgres":
            postgres.drop_database(self.database)
        self._tmp.cleanup()

    # -- the wire ---------------------------------------------------------------------

    def _answer(self, resp: t.Any, status: int, path: str) -> t.Any:
        figures.count("isolation model", unit="calls checked against the model")
        body = resp.get_json()
        assert resp.status_code == status, (path, resp.status_code, body)
        if status == 200:
            assert list(body) == ["result"], body
            return body["result"]["data"]
        assert_error_item(body, status, body["error"]["code"], path)
        return body["error"]

    def _query(self, path: str, input: t.Any, headers: dict[str, str]) -> t.Any:
        qs = {} if input is None else {"input": json.dumps(input)}
        return self.client.get(f"/trpc/{path}", query_string=qs, headers=headers)

    def _mutate(self, path: str, input: t.Any, headers: dict[str, str]) -> t.Any:
        return self.client.post(f"/trpc/{path}", json=input, headers=headers)

    def _bearer(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[tenant]}"}

    def _memory_call(self, key: Key, path: str, input: t.Any, status: int) -> t.Any:
        """A memory call with ``key``: a revoked key is refused whatever the call."""
        mutations = (
            "memory.add",
            "memory.delete",
            "memory.update",
            "memory.deleteAll",
            "memory.ingest",
        )
        send = self._mutate if path in mutations else self._query
        resp = send(path, input, {"x-api-key": key.secret})
        if key.revoked:
            error = self._answer(resp, 401, path)
            assert error["message"] == "API key has been revoked"
            return None
        return self._answer(resp, status, path)

    def _create_key(self, tenant: str, name: str) -> None:
        created = self._answer(
            self._mutate("keys.create", {"name": name}, self._bearer(tenant)), 200, "keys.create"
        )
        assert created["idpUserId"] == tenant
        self.keys.append(Key(created["id"], tenant, created["secret"]))

    def _live(self, tenant: str, user: str) -> list[Memory]:
        """The model's memories of one tenant's user, oldest first."""
        return [m for m in self.memories if m.live and m.tenant == tenant and m.user == user]

    # -- keys ---------------------------------------------------------------------------

    @rule(tenant=st.sampled_from(TENANTS), name=WORDS.filter(str.strip))
    def create_key(self, tenant, name):
        self._create_key(tenant, name)

    @rule(data=st.data(), caller=st.sampled_from(TENANTS))
    def revoke_key(self, data, caller):
        key = data.draw(st.sampled_from(self.keys), label="key")
        resp = self._mutate("keys.revoke", {"id": key.id}, self._bearer(caller))
        if key.tenant != caller:
            error = self._answer(resp, 401, "keys.revoke")
            assert error["message"] == "API key belongs to another user"
            return
        assert self._answer(resp, 200, "keys.revoke") == {"success": True}
        key.revoked = True

    @rule(caller=st.sampled_from(TENANTS))
    def revoke_a_key_that_never_existed(self, caller):
        resp = self._mutate("keys.revoke", {"id": str(uuid.uuid4())}, self._bearer(caller))
        self._answer(resp, 404, "keys.revoke")

    @rule(tenant=st.sampled_from(TENANTS))
    def list_keys(self, tenant):
        listed = self._answer(
            self._query("keys.list", None, self._bearer(tenant)), 200, "keys.list"
        )
        mine = [k for k in self.keys if k.tenant == tenant]
        assert [k["id"] for k in listed] == [k.id for k in mine]
        for shown, key in zip(listed, mine, strict=True):
            assert shown["idpUserId"] == tenant
            assert (shown["revokedAt"] is not None) == key.revoked
            assert "secret" not in shown and key.secret not in json.dumps(listed)

    # -- memories -----------------------------------------------------------------------

    @rule(data=st.data(), user=st.sampled_from(USERS), words=WORDS)
    def add(self, data, user, words):
        key = data.draw(st.sampled_from(self.keys), label="key")
        self.added += 1
        content = f"{words} #{self.added}"
        added = self._memory_call(key, "memory.add", {"userId": user, "content": content}, 200)
        if added is None:
            return
        assert (added["idpUserId"], added["userId"], added["content"]) == (
            key.tenant,
            user,
            content,
        )
        self.memories.append(Memory(added["id"], key.tenant, user, content))

    @rule(data=st.data(), user=st.sampled_from(USERS))
    def get_all(self, data, user):
        key = data.draw(st.sampled_from(self.keys), label="key")
        listed = self._memory_call(key, "memory.getAll", {"userId": user, "limit": 1000}, 200)
        if listed is None:
            return
        # Newest first; ties in time go to the later insert, so: the reverse of adding.
        expected = list(reversed(self._live(key.tenant, user)))
        assert [m["id"] for m in listed] == [m.id for m in expected]
        for shown, memory in zip(listed, expected, strict=True):
            assert (shown["idpUserId"], shown["userId"], shown["content"]) == (
                memory.tenant,
                memory.user,
                memory.content,
            )

    @rule(data=st.data(), prefix=st.sampled_from(["", "user-", "user-1", "u", "x"]))
    def users(self, data, prefix):
        """The key's tenant's end users with their counts: never another tenant's."""
        key = data.draw(st.sampled_from(self.keys), label="key")
        listed = self._memory_call(key, "memory.users", {"prefix": prefix}, 200)
        if listed is None:
            return
        expected = [
            (user, len(self._live(key.tenant, user)))
            for user in sorted(USERS)
            if user.startswith(prefix) and self._live(key.tenant, user)
        ]
        assert [(u["userId"], u["memories"]) for u in listed] == expected

    @precondition(lambda self: self.memories)
    @rule(data=st.data())
    def get_by_id(self, data):
        key = data.draw(st.sampled_from(self.keys), label="key")
        memory = data.draw(st.sampled_from(self.memories), label="memory")
        visible = memory.live and memory.tenant == key.tenant
        got = self._memory_call(key, "memory.getById", {"id": memory.id}, 200 if visible else 404)
        if got is None:
            return
        if visible:
            assert (got["id"], got["idpUserId"], got["userId"], got["content"]) == (
                memory.id,
                memory.tenant,
                memory.user,
                memory.content,
            )
        else:
            assert got["message"] == "Memory not found"

    @precondition(lambda self: self.memories)
    @rule(data=st.data())
    def delete(self, data):
        key = data.draw(st.sampled_from(self.keys), label="key")
        memory = data.draw(st.sampled_from(self.memories), label="memory")
        visible = memory.live and memory.tenant == key.tenant
        done = self._memory_call(key, "memory.delete", {"id": memory.id}, 200 if visible else 404)
        if done is not None and visible:
            assert done == {"success": True}
            memory.live = False

    @precondition(lambda self: self.memories)
    @rule(data=st.data(), words=WORDS.filter(str.strip))
    def update(self, data, words):
        key = data.draw(st.sampled_from(self.keys), label="key")
        memory = data.draw(st.sampled_from(self.memories), label="memory")
        visible = memory.live and memory.tenant == key.tenant
        self.added += 1
        content = f"{words} ~{self.added}"
        got = self._memory_call(
            key, "memory.update", {"id": memory.id, "content": content}, 200 if visible else 404
        )
        if got is None or not visible:
            return
        assert (got["id"], got["idpUserId"], got["userId"], got["content"]) == (
            memory.id,
            memory.tenant,
            memory.user,
            content,
        )
        memory.versions.append(memory.content)
        memory.content = content

    @precondition(lambda self: self.memories)
    @rule(data=st.data())
    def history(self, data):
        key = data.draw(st.sampled_from(self.keys), label="key")
        memory = data.draw(st.sampled_from(self.memories), label="memory")
        visible = memory.live and memory.tenant == key.tenant
        got = self._memory_call(key, "memory.history", {"id": memory.id}, 200 if visible else 404)
        if got is not None and visible:
            assert [v["content"] for v in got] == [*memory.versions, memory.content]
            assert [v["version"] for v in got] == list(range(1, len(got) + 1))

    @rule(data=st.data(), user=st.sampled_from(USERS))
    def delete_all(self, data, user):
        """Erase one end user of the key's tenant: the same name elsewhere is untouched."""
        key = data.draw(st.sampled_from(self.keys), label="key")
        done = self._memory_call(key, "memory.deleteAll", {"userId": user}, 200)
        if done is None:
            return
        erased = self._live(key.tenant, user)
        assert done == {"success": True, "deleted": len(erased)}
        for memory in erased:
            memory.live = False

    @rule(data=st.data(), user=st.sampled_from(USERS), words=WORDS.filter(str.strip))
    def search(self, data, user, words):
        key = data.draw(st.sampled_from(self.keys), label="key")
        # Often the exact text of a memory, maybe another tenant's or user's: the
        # most tempting query there is for a leak.
        if self.memories and data.draw(st.booleans(), label="exact"):
            query = data.draw(st.sampled_from(self.memories), label="memory").content
        else:
            query = words
        mode = data.draw(st.sampled_from(["semantic", "keyword", "hybrid"]), label="mode")
        found = self._memory_call(
            key,
            "memory.search",
            {"userId": user, "query": query, "threshold": 0, "limit": 100, "mode": mode},
            200,
        )
        if found is None:
            return
        expected = {m.id: m for m in self._live(key.tenant, user)}
        assert len(expected) <= 100
        if mode == "semantic":
            assert {m["id"] for m in found} == set(expected)
        else:
            # Keyword matches are some of the user's memories, never anyone else's.
            assert {m["id"] for m in found} <= set(expected)
            assert all(m["matchedBy"] for m in found)
        for shown in found:
            memory = expected[shown["id"]]
            assert (shown["idpUserId"], shown["userId"], shown["content"]) == (
                memory.tenant,
                memory.user,
                memory.content,
            )
        similarities = [m["similarity"] for m in found]
        if mode == "semantic":  # the others rank by keyword strength too
            assert similarities == sorted(similarities, reverse=True)
        assert all(0 <= s <= 1 for s in similarities)

    @rule(data=st.data())
    def batch_reads(self, data):
        """One request, several users and ids: each call still answers for the key's tenant."""
        key = data.draw(st.sampled_from(self.keys), label="key")
        users = data.draw(st.lists(st.sampled_from(USERS), min_size=1, max_size=3), label="users")
        picked = (
            data.draw(st.lists(st.sampled_from(self.memories), max_size=3), label="memories")
            if self.memories
            else []
        )
        paths = ["memory.getAll"] * len(users) + ["memory.getById"] * len(picked)
        inputs = [{"userId": u} for u in users] + [{"id": m.id} for m in picked]
        resp = self.client.get(
            "/trpc/" + ",".join(paths),
            query_string={
                "batch": "1",
                "input": json.dumps({str(i): v for i, v in enumerate(inputs)}),
            },
            headers={"x-api-key": key.secret},
        )
        figures.count("isolation model", unit="calls checked against the model")
        items = resp.get_json()
        assert isinstance(items, list) and len(items) == len(paths), items
        for i, item in enumerate(items):
            if key.revoked:
                assert_error_item(item, 401, "UNAUTHORIZED", paths[i])
            elif i < len(users):
                expected = reversed(self._live(key.tenant, users[i]))
                assert [m["id"] for m in item["result"]["data"]] == [m.id for m in expected]
            else:
                memory = picked[i - len(users)]
                if memory.live and memory.tenant == key.tenant:
                    assert item["result"]["data"]["content"] == memory.content
                else:
                    assert_error_item(item, 404, "NOT_FOUND", "memory.getById")

    # -- conversations ------------------------------------------------------------------

    def _messages(self, tenant: str, user: str, session: str) -> list[Memory]:
        """The model's live messages of one session, by position."""
        found = [m for m in self._live(tenant, user) if m.session == session]
        return sorted(found, key=lambda m: t.cast(int, m.position))

    @rule(
        data=st.data(),
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
        ids=st.lists(st.sampled_from(MESSAGE_IDS), min_size=1, max_size=4),
    )
    def ingest(self, data, user, session, ids):
        """A conversation into a session: the same session name elsewhere is another session."""
        key = data.draw(st.sampled_from(self.keys), label="key")
        messages = []
        for message_id in ids:
            self.added += 1
            message = {"role": "user", "content": f"said {self.added}"}
            if message_id is not None:
                message["id"] = message_id
            messages.append(message)
        out = self._memory_call(
            key, "memory.ingest", {"userId": user, "sessionId": session, "messages": messages}, 200
        )
        if out is None:
            return
        held = self._messages(key.tenant, user, session)
        by_id = {m.message_id: m for m in held if m.message_id is not None}
        # Positions go on from where the session was, past deleted messages; a
        # session whose every message went starts again at 0.
        where = (key.tenant, user, session)
        position = self.next_position.get(where, 0) if held else 0
        duplicates = 0
        for message, shown in zip(messages, out["memories"], strict=True):
            assert (shown["idpUserId"], shown["userId"], shown["sessionId"]) == (
                key.tenant, user, session
            )  # fmt: skip
            known = by_id.get(message.get("id"))
            if known is not None:
                duplicates += 1
                assert (shown["id"], shown["content"]) == (known.id, known.content)
                continue
            assert (shown["content"], shown["position"]) == (message["content"], position)
            memory = Memory(shown["id"], key.tenant, user, message["content"], session=session,
                            position=position, message_id=message.get("id"))  # fmt: skip
            self.memories.append(memory)
            if memory.message_id is not None:
                by_id[memory.message_id] = memory
            position += 1
        assert out["duplicates"] == duplicates
        self.next_position[where] = position

    @rule(data=st.data(), user=st.sampled_from(USERS))
    def sessions(self, data, user):
        key = data.draw(st.sampled_from(self.keys), label="key")
        listed = self._memory_call(key, "memory.sessions", {"userId": user}, 200)
        if listed is None:
            return
        expected = {
            (session, len(self._messages(key.tenant, user, session)))
            for session in SESSIONS
            if self._messages(key.tenant, user, session)
        }
        assert {(s["sessionId"], s["messages"]) for s in listed} == expected

    @rule(data=st.data(), user=st.sampled_from(USERS), session=st.sampled_from(SESSIONS))
    def session(self, data, user, session):
        key = data.draw(st.sampled_from(self.keys), label="key")
        expected = self._messages(key.tenant, user, session)
        got = self._memory_call(
            key,
            "memory.session",
            {"userId": user, "sessionId": session, "limit": 1000},
            200 if expected else 404,
        )
        if got is None:
            return
        if not expected:
            assert got["message"] == "Session not found"
            return
        assert [(m["id"], m["content"]) for m in got] == [(m.id, m.content) for m in expected]
        assert all((m["idpUserId"], m["userId"]) == (key.tenant, user) for m in got)

    # -- storage --------------------------------------------------------------------------

    @invariant()
    def storage_holds_exactly_the_models_memories_with_one_vector_each(self):
        with self.app.app_context():
            conn = t.cast(t.Any, store()).conn
            rows = conn.execute("SELECT id, tenant, user_id, content FROM memories").fetchall()
            (vectors,) = conn.execute("SELECT count(*) FROM memory_vectors").fetchone()
            (versions,) = conn.execute("SELECT count(*) FROM memory_history").fetchone()
            sessions = conn.execute(
                "SELECT tenant, user_id, session_id, messages FROM memory_sessions"
            ).fetchall()
        live = [m for m in self.memories if m.live]
        assert set(rows) == {(m.id, m.tenant, m.user, m.content) for m in live}
        assert vectors == len(live)
        assert versions == sum(len(m.versions) for m in live)
        # A session's row counts its messages, and goes with the last of them.
        held = collections.Counter((m.tenant, m.user, m.session) for m in live if m.session)
        assert {(t_, u, s_): n for t_, u, s_, n in sessions} == dict(held)


SETTINGS = settings(
    max_examples=30 * figures.SCALE,
    stateful_step_count=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize(
    "search_cache_mb, shared_min_kb",
    [(256, 4096), (256, 0), (0, 0)],
    ids=["search-cache", "shared-search-cache", "no-search-cache"],
)
def test_random_operation_sequences_never_cross_a_tenant_or_user_boundary(
    search_cache_mb, shared_min_kb, backend
):
    machine = type(
        f"IsolationMachine{search_cache_mb}{shared_min_kb}{backend}",
        (IsolationMachine,),
        {"search_cache_mb": search_cache_mb, "shared_min_kb": shared_min_kb,
         "store_kind": backend},
    )  # fmt: skip
    run_state_machine_as_test(machine, settings=SETTINGS)

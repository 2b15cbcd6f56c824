"""Extraction jobs in the store: durable, claimed under a lease, settled once.

A job is a row of ``memory_jobs``, written in the transaction that stores
the messages it reads (store first: a job exists exactly when its
messages do). A worker *claims* due jobs in a write transaction: each
becomes ``running`` under a lease (``lease_owner``, ``lease_until``), its
attempt counted, while the jobs running on its box stay under the box's
bound. The model is called outside any transaction; the job's facts,
supersessions and status are then written in one transaction that first
checks the lease is still the worker's (:meth:`JobSql.job_held`). A
worker killed mid-job leaves a ``running`` row whose lease runs out; the
next claim takes it again, and a late answer of the dead claim (or of a
slow one) finds its lease gone and changes nothing: a job is applied once.

``memory_usage`` counts each tenant's model tokens per UTC day, for the
budget and ``memsvc jobs``. ``memory_events`` records the versions of a
memory made by something other than an add or an update (a fact
superseded), for its history. The SQL here reads the same on both stores.
"""

from __future__ import annotations

import json
import typing as t

from ..models import Job
from ..models import Memory
from ..models import compact_json
from .base import MEMORY_COLUMNS
from .base import memory_of
from .jobs import _DAY_MS
from .jobs import day_of

#: Schema 9, on both stores.
JOBS = [
    """CREATE TABLE memory_jobs (
        id text PRIMARY KEY,
        tenant text NOT NULL,
        user_id text NOT NULL,
        session_id text,
        status text NOT NULL,
        attempts integer NOT NULL,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        run_after bigint NOT NULL,
        messages text NOT NULL,
        replaces integer NOT NULL,
        error text,
        facts text,
        prompt_tokens bigint NOT NULL,
        completion_tokens bigint NOT NULL,
        box text,
        lease_owner text,
        lease_until bigint
    )""",
    "CREATE INDEX memory_jobs_due ON memory_jobs (status, run_after)",
    "CREATE INDEX memory_jobs_by_tenant ON memory_jobs (tenant, created_at, id)",
    "CREATE INDEX memory_jobs_by_user ON memory_jobs (tenant, user_id, created_at, id)",
    """CREATE TABLE memory_usage (
        tenant text NOT NULL,
        day bigint NOT NULL,
        prompt_tokens bigint NOT NULL,
        completion_tokens bigint NOT NULL,
        PRIMARY KEY (tenant, day)
    )""",
    """CREATE TABLE memory_events (
        memory_seq bigint NOT NULL REFERENCES memories (seq) ON DELETE CASCADE,
        version integer NOT NULL,
        event text NOT NULL,
        PRIMARY KEY (memory_seq, version)
    )""",
]

#: What schema 9 adds, as the schema checks name them.
JOB_TABLES = ("memory_jobs", "memory_usage", "memory_events")
JOB_INDEXES = ("memory_jobs_due", "memory_jobs_by_tenant", "memory_jobs_by_user")

_JOB_COLUMNS = (
    "id, tenant, user_id, session_id, status, attempts, created_at, updated_at, messages, "
    "error, facts, prompt_tokens, completion_tokens, run_after, replaces"
)
_VISIBLE = "(expires_at IS NULL OR expires_at > ?)"


def _job_of(row: t.Sequence[t.Any]) -> Job:
    return Job(
        row[0], row[1], row[2], row[3], row[4], int(row[5]), int(row[6]), int(row[7]),
        tuple(json.loads(row[8])),
        error=row[9],
        facts=None if row[10] is None else json.loads(row[10]),
        prompt_tokens=int(row[11]),
        completion_tokens=int(row[12]),
        run_after=int(row[13]),
        replaces=bool(row[14]),
    )  # fmt: skip


class _Sql(t.Protocol):
    _CLAIM_LOCK: t.ClassVar[str | None]
    _FOR_UPDATE: t.ClassVar[str]

    def _execute(self, query: str, params: t.Sequence[t.Any] | None = None) -> t.Any: ...

    def _one(self, query: str, params: t.Sequence[t.Any] | None = None) -> t.Any: ...

    def _rows(self, query: str, params: t.Sequence[t.Any] | None = None) -> list[t.Any]: ...

    def _any(self, column: str, values: t.Sequence[t.Any]) -> list[tuple[str, list[t.Any]]]: ...

    def _lock_user(self, tenant: str, user_id: str) -> None: ...


class JobSql:
    """The job half of :class:`~.sql.SqlStore`."""

    #: What makes two claims take turns (None: the write transaction already does).
    _CLAIM_LOCK: t.ClassVar[str | None] = None
    #: What keeps a row read in a write transaction from changing until it ends.
    _FOR_UPDATE: t.ClassVar[str] = ""

    def insert_job(self: _Sql, job: Job) -> None:
        self._execute(
            f"INSERT INTO memory_jobs ({_JOB_COLUMNS}, box, lease_owner, lease_until) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
            (
                job.id, job.tenant, job.user_id, job.session_id, job.status, job.attempts,
                job.created_at, job.updated_at, compact_json(list(job.messages)), job.error,
                None if job.facts is None else compact_json(job.facts), job.prompt_tokens,
                job.completion_tokens, job.run_after, int(job.replaces),
            ),
        )  # fmt: skip

    def get_job(self: _Sql, tenant: str, job_id: str) -> Job | None:
        row = self._one(
            f"SELECT {_JOB_COLUMNS} FROM memory_jobs WHERE id = ? AND tenant = ?", (job_id, tenant)
        )
        return None if row is None else _job_of(row)

    def list_jobs(
        self: _Sql,
        tenant: str,
        limit: int,
        *,
        user_id: str | None = None,
        status: str | None = None,
        after: str | None = None,
    ) -> list[Job] | None:
        where, params = ["tenant = ?"], [tenant]
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if after is not None:
            cursor = self._one(
                "SELECT created_at FROM memory_jobs WHERE id = ? AND tenant = ?", (after, tenant)
            )
            if cursor is None:
                return None
            where.append("(created_at < ? OR (created_at = ? AND id < ?))")
            params += [cursor[0], cursor[0], after]
        rows = self._rows(
            f"SELECT {_JOB_COLUMNS} FROM memory_jobs WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit),
        )
        return [_job_of(row) for row in rows]

    def claim_jobs(
        self: _Sql,
        now: int,
        *,
        box: str,
        owner: str,
        lease_ms: int,
        max_running: int,
        limit: int,
        daily_tokens: int | None,
        max_attempts: int | None = None,
    ) -> list[Job]:
        if self._CLAIM_LOCK is not None:
            self._execute(self._CLAIM_LOCK)
        (running,) = self._one(
            "SELECT count(*) FROM memory_jobs WHERE status = 'running' AND box = ? "
            "AND lease_until > ?",
            (box, now),
        )
        room = min(limit, max_running - int(running))
        if room <= 0:
            return []
        # Due: queued and past its wait, or running under a lease that ran out.
        rows = self._rows(
            f"SELECT {_JOB_COLUMNS} FROM memory_jobs WHERE status = 'queued' AND run_after <= ? "
            "UNION ALL "
            f"SELECT {_JOB_COLUMNS} FROM memory_jobs WHERE status = 'running' AND lease_until <= ? "
            "ORDER BY 14, 7 LIMIT ?",
            (now, now, room * 4),
        )
        claimed: list[Job] = []
        spent: dict[str, int] = {}
        today = day_of(now)
        for row in rows:
            job = _job_of(row)
            if (
                job.status == "running"
                and max_attempts is not None
                and job.attempts >= max_attempts
            ):
                # Its worker stopped during each of its attempts: give up on it.
                self._execute(
                    "UPDATE memory_jobs SET status = 'failed', updated_at = ?, error = ?, "
                    "box = NULL, lease_owner = NULL, lease_until = NULL WHERE id = ? "
                    "AND status = 'running' AND lease_until <= ?",
                    (
                        now,
                        f"the worker running it stopped before it ended, {job.attempts} times "
                        "(MEMSVC_EXTRACT_MAX_ATTEMPTS); see the workers' logs",
                        job.id,
                        now,
                    ),
                )
                continue
            if daily_tokens is not None:
                if job.tenant not in spent:
                    spent[job.tenant] = JobSql.tokens_on(self, job.tenant, today)
                if spent[job.tenant] >= daily_tokens:
                    self._execute(
                        "UPDATE memory_jobs SET status = 'queued', run_after = ?, error = ?, "
                        "box = NULL, lease_owner = NULL, lease_until = NULL WHERE id = ?",
                        (
                            (today + 1) * _DAY_MS,
                            f"waiting: this tenant's model budget for today "
                            f"(MEMSVC_LLM_DAILY_TOKENS, {daily_tokens:,} tokens) is spent; "
                            "it runs after 00:00 UTC",
                            job.id,
                        ),
                    )
                    continue
            # Still due when it is written: a settle that held the row meanwhile wins.
            taken = self._one(
                "UPDATE memory_jobs SET status = 'running', attempts = attempts + 1, "
                "updated_at = ?, box = ?, lease_owner = ?, lease_until = ? WHERE id = ? AND "
                "((status = 'queued' AND run_after <= ?) OR "
                "(status = 'running' AND lease_until <= ?)) RETURNING id",
                (now, box, owner, now + lease_ms, job.id, now, now),
            )
            if taken is None:
                continue
            claimed.append(
                Job(
                    job.id,
                    job.tenant,
                    job.user_id,
                    job.session_id,
                    "running",
                    job.attempts + 1,
                    job.created_at,
                    now,
                    job.messages,
                    job.error,
                    job.facts,
                    job.prompt_tokens,
                    job.completion_tokens,
                    job.run_after,
                    job.replaces,
                )  # fmt: skip
            )
            if len(claimed) == room:
                break
        return claimed

    def job_reading(self: _Sql, tenant: str, user_id: str, memory_id: str) -> Job | None:
        row = self._one(
            f"SELECT {_JOB_COLUMNS} FROM memory_jobs WHERE tenant = ? AND user_id = ? "
            "AND messages LIKE ? ORDER BY created_at DESC, id DESC LIMIT 1",
            (tenant, user_id, f'%"{memory_id}"%'),
        )
        return None if row is None else _job_of(row)

    def jobs_due(self: _Sql, now: int) -> bool:
        row = self._one(
            "SELECT 1 FROM memory_jobs WHERE (status = 'queued' AND run_after <= ?) "
            "OR (status = 'running' AND lease_until <= ?) LIMIT 1",
            (now, now),
        )
        return row is not None

    def job_held(self: _Sql, job_id: str, owner: str) -> Job | None:
        row = self._one(
            f"SELECT {_JOB_COLUMNS}, lease_owner FROM memory_jobs WHERE id = ? "
            f"AND status = 'running'{self._FOR_UPDATE}",
            (job_id,),
        )
        if row is None or row[-1] != owner:
            return None
        return _job_of(row[:-1])

    def settle_job(
        self: _Sql,
        job_id: str,
        now: int,
        *,
        status: str,
        error: str | None = None,
        facts: dict[str, t.Any] | None = None,
        run_after: int | None = None,
        tokens: tuple[int, int] = (0, 0),
    ) -> None:
        row = self._one(
            "UPDATE memory_jobs SET status = ?, error = ?, facts = ?, updated_at = ?, "
            "run_after = coalesce(?, run_after), prompt_tokens = prompt_tokens + ?, "
            "completion_tokens = completion_tokens + ?, box = NULL, lease_owner = NULL, "
            "lease_until = NULL WHERE id = ? RETURNING tenant",
            (
                status, error, None if facts is None else compact_json(facts), now, run_after,
                tokens[0], tokens[1], job_id,
            ),
        )  # fmt: skip
        if row is None or tokens == (0, 0):
            return
        self._execute(
            "INSERT INTO memory_usage (tenant, day, prompt_tokens, completion_tokens) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, day) DO UPDATE SET "
            "prompt_tokens = memory_usage.prompt_tokens + excluded.prompt_tokens, "
            "completion_tokens = memory_usage.completion_tokens + excluded.completion_tokens",
            (row[0], day_of(now), tokens[0], tokens[1]),
        )

    def retry_job(self: _Sql, tenant: str, job_id: str, now: int) -> Job | None:
        self._execute(
            "UPDATE memory_jobs SET status = 'queued', attempts = 0, error = NULL, "
            "updated_at = ?, run_after = ? WHERE id = ? AND tenant = ? AND status = 'failed'",
            (now, now, job_id, tenant),
        )
        return JobSql.get_job(self, tenant, job_id)

    def tokens_on(self: _Sql, tenant: str, day: int) -> int:
        row = self._one(
            "SELECT prompt_tokens + completion_tokens FROM memory_usage "
            "WHERE tenant = ? AND day = ?",
            (tenant, day),
        )
        return 0 if row is None else int(row[0])

    def purge_jobs(self: _Sql, before: int, limit: int) -> int:
        # A job that ended was last due no later than it ended (run_after <= updated_at),
        # so the index on (status, run_after) finds the candidates.
        gone = self._execute(
            "DELETE FROM memory_jobs WHERE id IN (SELECT id FROM memory_jobs "
            "WHERE status IN ('done', 'failed') AND run_after < ? AND updated_at < ? LIMIT ?)",
            (before, before, limit),
        ).rowcount
        self._execute("DELETE FROM memory_usage WHERE day < ?", (day_of(before),))
        return int(gone)

    def job_counts(self: _Sql) -> dict[str, int]:
        rows = self._rows("SELECT status, count(*) FROM memory_jobs GROUP BY status")
        return {status: int(n) for status, n in rows}

    def user_memories(
        self: _Sql, tenant: str, user_id: str, ids: t.Sequence[str], now: int
    ) -> list[tuple[int, Memory]]:
        found: dict[str, tuple[int, Memory]] = {}
        for clause, values in self._any("id", list(dict.fromkeys(ids))):
            for row in self._rows(
                f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE {clause} AND tenant = ? "
                f"AND user_id = ? AND {_VISIBLE}",
                (*values, tenant, user_id, now),
            ):
                found[row[1]] = (int(row[0]), memory_of(row[1:]))
        return [found[i] for i in dict.fromkeys(ids) if i in found]

    def current_facts(self: _Sql, tenant: str, user_id: str, now: int) -> list[tuple[int, Memory]]:
        rows = self._rows(
            f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
            f"AND kind = 'fact' AND superseded_by IS NULL AND {_VISIBLE} ORDER BY seq",
            (tenant, user_id, now),
        )
        return [(int(row[0]), memory_of(row[1:])) for row in rows]

    def facts_replaced_by(
        self: _Sql, tenant: str, user_id: str, fact_id: str, limit: int, now: int
    ) -> list[Memory]:
        rows = self._rows(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
            f"AND kind = 'fact' AND superseded_by = ? AND {_VISIBLE} ORDER BY seq LIMIT ?",
            (tenant, user_id, fact_id, now, limit),
        )
        return [memory_of(row) for row in rows]

    def record_event(self: _Sql, seq: int, version: int, event: str) -> None:
        self._execute(
            "INSERT INTO memory_events (memory_seq, version, event) VALUES (?, ?, ?)",
            (seq, version, event),
        )

    def events(self: _Sql, seq: int) -> dict[int, str]:
        rows = self._rows("SELECT version, event FROM memory_events WHERE memory_seq = ?", (seq,))
        return {int(v): e for v, e in rows}

    def sessions_of_messages(
        self: _Sql, tenant: str, user_id: str | None
    ) -> list[tuple[str, str, list[str]]]:
        where, params = "tenant = ? AND kind = 'message'", [tenant]
        if user_id is not None:
            where += " AND user_id = ?"
            params.append(user_id)
        rows = self._rows(
            f"SELECT user_id, session_id, id FROM memories WHERE {where} "
            "ORDER BY user_id, session_id, position",
            params,
        )
        out: list[tuple[str, str, list[str]]] = []
        for user, session, memory_id in rows:
            if not out or out[-1][:2] != (user, session):
                out.append((user, session, []))
            out[-1][2].append(memory_id)
        return out

    # -- kept in the transactions that delete memories ------------------------------

    def _jobs_erased(self: _Sql, tenant: str, user_id: str) -> None:
        """An erased user's jobs go with them."""
        self._execute("DELETE FROM memory_jobs WHERE tenant = ? AND user_id = ?", (tenant, user_id))

    def _source_gone(self: _Sql, tenant: str, user_id: str, memory_id: str) -> None:
        """A deleted message is no fact's source any more."""
        rows = self._rows(
            "SELECT seq, sources FROM memories WHERE tenant = ? AND user_id = ? "
            "AND kind = 'fact' AND sources LIKE ?",
            (tenant, user_id, f'%"{memory_id}"%'),
        )
        for seq, sources in rows:
            kept = [s for s in json.loads(sources) if s != memory_id]
            self._execute(
                "UPDATE memories SET sources = ? WHERE seq = ?", (compact_json(kept), seq)
            )

"""Per-key request limits kept in PostgreSQL, shared by every app server.

The same two limits as :class:`memsvc.limits.Limiter`, with the same
answers, counted once for all the servers (and all their worker processes)
that share one database:

* **rate**: at most N accepted calls in any rolling 60 seconds. Each
  accepted call is a row (key, sequence number 1, 2, 3..., time); a call is
  accepted only if the key's N-th most recent call is 60 s old or more (or
  does not exist). A call that costs more counts as several: its extra
  units, charged once its cost is known (:meth:`PgLimiter.charge`), are as
  many rows of the same time, if they fit. That is exact: no 60-second window, wherever it starts,
  ever holds more than N. Each accepted call deletes the key's rows that
  left the window, oldest first, from where the last deletion stopped (kept
  in the key's row of ``memsvc_limit_keys``), so it never walks over deleted
  rows again and a key keeps about one window of rows.
* **concurrency**: at most M calls executing at once. A key has slot rows
  0, 1, 2... (as many as it ever held at once), reused in place; an
  executing call holds one (its holder, ``host:pid``, a ticket, an expiry)
  until it is answered. A slot past its expiry no longer counts; nor does
  one whose holder is a process of this host that no longer exists, so a
  killed worker's slots are freed at the next refusal on its own box, and a
  dead holder's elsewhere at expiry.

Rows updated in place (a key's row, its slots) change no indexed column,
in tables that leave room in each page (fillfactor 50): the updates stay
within the page (HOT) and add no index entries; deleted calls are never
read again. So what an acquire costs does not grow with a busy key's
traffic between two vacuums.

Times come from the database's clock (``clock_timestamp()``), one clock for
every server. A key's times never go back: if that clock is set back a
little, the key's calls keep counting at the times they were recorded;
if by more than a minute, the key's history (from the clock's future) is
forgotten.

Each acquire, charge or release is one statement, ``SELECT`` of a plpgsql
function. Acquire first takes a transaction-level advisory lock on the
key, so the acquires of one key are serialised across every server while
keys never wait on each other; a release frees its own slot by its ticket.
A refused call records nothing. The functions need READ COMMITTED (each of
their statements must see what the key's previous holder of the lock
committed) and say so if run under another isolation level.

The tables are UNLOGGED: no write-ahead log, so an accepted call costs no
disk flush. Their rows are disposable (a crash of the database, or a
failover to a replica, empties them and only resets the counters), as are
those of :class:`memsvc.limits.Limiter`.

:data:`SCHEMA` creates the tables and functions (idempotently);
:func:`install` runs it. :meth:`PgLimiter.sweep` deletes what keys that
made no call for a while left behind (for periodic housekeeping).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import typing as t

import psycopg
from psycopg import pq

from ...limits import WINDOW_MS
from ...limits import Limits
from ...limits import Refused
from ...limits import check_units

Connect = t.Callable[[], contextlib.AbstractContextManager[psycopg.Connection[t.Any]]]

#: Rows older than this (two windows) are past any use; :meth:`PgLimiter.sweep`
#: removes those of keys that made no call since.
_SWEEP_CALLS_AFTER_MS = 2 * WINDOW_MS
#: Expired slots a sweep may remove (a minute after their expiry).
_SWEEP_SLOTS_AFTER_MS = WINDOW_MS

_NOW_MS = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

SCHEMA: list[str] = [
    # One row per rate-limited key: its calls below first_seq are deleted,
    # its latest is last_seq (0: none), made at last_at (the key's time,
    # which never decreases). Updated in place by every admitted call.
    """
    CREATE UNLOGGED TABLE IF NOT EXISTS memsvc_limit_keys (
        key_id text PRIMARY KEY,
        first_seq bigint NOT NULL,
        last_seq bigint NOT NULL,
        last_at bigint NOT NULL
    ) WITH (fillfactor = 50)
    """,
    # One row per accepted call of a rate-limited key, numbered 1, 2, 3...;
    # at_ms never decreases along seq.
    """
    CREATE UNLOGGED TABLE IF NOT EXISTS memsvc_limit_calls (
        key_id text NOT NULL,
        seq bigint NOT NULL,
        at_ms bigint NOT NULL,
        PRIMARY KEY (key_id, seq) INCLUDE (at_ms)
    )
    """,
    # A concurrency-limited key's slots, 0, 1, 2... (as many as it ever held
    # at once), reused in place: holder NULL when free. The ticket changes
    # with every use, so a late release cannot free the slot's next holder.
    """
    CREATE UNLOGGED TABLE IF NOT EXISTS memsvc_limit_slots (
        key_id text NOT NULL,
        n integer NOT NULL,
        holder text,
        ticket bigint NOT NULL,
        expires_ms bigint NOT NULL,
        PRIMARY KEY (key_id, n)
    ) WITH (fillfactor = 50)
    """,
    # Take p_key's lock for the rest of the transaction, which must be READ
    # COMMITTED: each statement then sees what the lock's previous holder
    # committed.
    """
    CREATE OR REPLACE FUNCTION memsvc_limit_lock(p_key text)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
    BEGIN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'memsvc limits need READ COMMITTED transactions, not %',
                upper(current_setting('transaction_isolation'))
                USING HINT = 'Give the limiter connections whose default_transaction_isolation '
                             'is read committed.';
        END IF;
        PERFORM pg_advisory_xact_lock(hashtextextended('memsvc-limits:' || p_key, 0));
    END
    $$
    """,
    # Under p_key's lock: whether p_units more calls fit in its window of
    # p_per_minute. o_retry_ms is NULL if they do, else how long until
    # p_retry_units would; o_first, o_last and o_at are what
    # memsvc_limit_record needs to record them. Calls are numbered 1, 2,
    # 3... without gaps (a call of several units has as many rows), so the
    # key's N-th most recent is number last - N + 1.
    f"""
    CREATE OR REPLACE FUNCTION memsvc_limit_rate(
        p_key text, p_per_minute integer, p_units integer, p_retry_units integer, p_now bigint,
        OUT o_first bigint, OUT o_last bigint, OUT o_at bigint, OUT o_retry_ms bigint
    )
    LANGUAGE plpgsql VOLATILE
    AS $$
    DECLARE
        v_last_at bigint;
        v_nth bigint;
        v_nth_at bigint;
    BEGIN
        o_at := p_now;
        SELECT k.first_seq, k.last_seq, k.last_at INTO o_first, o_last, v_last_at
          FROM memsvc_limit_keys k
         WHERE k.key_id = p_key;
        IF NOT FOUND THEN
            -- A new key (or one swept while idle): from its rows, if any.
            SELECT coalesce(min(c.seq), 1), coalesce(max(c.seq), 0), max(c.at_ms)
              INTO o_first, o_last, v_last_at
              FROM memsvc_limit_calls c
             WHERE c.key_id = p_key;
        END IF;
        IF v_last_at > p_now + {WINDOW_MS} THEN
            -- Recorded by a clock far ahead of this one: meaningless now.
            DELETE FROM memsvc_limit_calls c
             WHERE c.key_id = p_key AND c.seq >= o_first AND c.seq <= o_last;
            o_first := o_last + 1;
        ELSIF v_last_at > p_now THEN
            o_at := v_last_at;  -- the clock was set back a little
        END IF;
        v_nth := o_last + p_units - p_per_minute;  -- must have left the window
        IF v_nth >= o_first THEN
            SELECT c.at_ms INTO v_nth_at
              FROM memsvc_limit_calls c
             WHERE c.key_id = p_key AND c.seq = v_nth;
            IF v_nth_at > o_at - {WINDOW_MS} THEN
                SELECT c.at_ms + {WINDOW_MS} - p_now INTO o_retry_ms
                  FROM memsvc_limit_calls c
                 WHERE c.key_id = p_key AND c.seq = o_last + p_retry_units - p_per_minute;
            END IF;
        END IF;
    END
    $$
    """,
    # Under p_key's lock, once memsvc_limit_rate said they fit: record
    # p_units calls at p_at. First the key's calls that left the window,
    # oldest first: all those up to its N-th most recent before these (out of
    # it, or they would not fit) and a few more. Only the range from
    # first_seq is read: rows deleted before are not walked over again.
    f"""
    CREATE OR REPLACE FUNCTION memsvc_limit_record(
        p_key text, p_per_minute integer, p_units integer,
        p_first bigint, p_last bigint, p_at bigint
    ) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
    DECLARE
        v_nth bigint := p_last + p_units - p_per_minute;
        v_first bigint := p_first;
        v_deleted bigint;
    BEGIN
        DELETE FROM memsvc_limit_calls c
         WHERE c.key_id = p_key
           AND c.seq >= v_first AND c.seq < greatest(v_first + p_units + 1, v_nth + 1)
           AND c.at_ms <= p_at - {WINDOW_MS};
        GET DIAGNOSTICS v_deleted = ROW_COUNT;
        v_first := greatest(v_first + v_deleted, v_nth + 1);
        INSERT INTO memsvc_limit_calls (key_id, seq, at_ms)
        SELECT p_key, n, p_at FROM generate_series(p_last + 1, p_last + p_units) AS n;
        INSERT INTO memsvc_limit_keys AS k (key_id, first_seq, last_seq, last_at)
        VALUES (p_key, v_first, p_last + p_units, p_at)
        ON CONFLICT (key_id) DO UPDATE
           SET first_seq = excluded.first_seq,
               last_seq = excluded.last_seq,
               last_at = excluded.last_at;
    END
    $$
    """,
    # Admit one call of p_key or say why not. Admitted: refused is NULL, and
    # (slot, ticket) is the slot held (NULL without a concurrency limit).
    # Refused for the rate: refused = 'rate', retry_after_ms until the call
    # that must leave the window leaves it. Refused for concurrency: refused
    # = 'concurrent', and holders, slots, tickets list the slots counted; the
    # caller may then ask again naming those it knows to be dead (p_free_slots,
    # p_free_tickets): they are freed first. p_now_ms NULL: the database's clock.
    f"""
    CREATE OR REPLACE FUNCTION memsvc_limit_acquire(
        p_key text,
        p_per_minute integer,
        p_concurrent integer,
        p_holder text,
        p_now_ms bigint,
        p_ttl_ms bigint,
        p_free_slots integer[] DEFAULT NULL,
        p_free_tickets bigint[] DEFAULT NULL
    ) RETURNS TABLE (
        refused text, retry_after_ms bigint, slot integer, ticket bigint,
        holders text[], slots integer[], tickets bigint[]
    )
    LANGUAGE plpgsql VOLATILE
    AS $$
    DECLARE
        v_now bigint;
        v_rate record;
        v_held bigint;
        v_free integer;
        v_next integer;
        v_ticket bigint;
    BEGIN
        PERFORM memsvc_limit_lock(p_key);
        -- Read only once the lock is held: the key's times are in order.
        v_now := coalesce(p_now_ms, {_NOW_MS});

        IF p_per_minute > 0 THEN
            SELECT * INTO v_rate FROM memsvc_limit_rate(p_key, p_per_minute, 1, 1, v_now);
            IF v_rate.o_retry_ms IS NOT NULL THEN
                RETURN QUERY SELECT 'rate'::text, v_rate.o_retry_ms,
                    NULL::integer, NULL::bigint, NULL::text[], NULL::integer[], NULL::bigint[];
                RETURN;
            END IF;
        END IF;

        IF p_concurrent > 0 THEN
            IF p_free_slots IS NOT NULL THEN
                UPDATE memsvc_limit_slots s
                   SET holder = NULL
                  FROM unnest(p_free_slots, p_free_tickets) AS d (n, ticket)
                 WHERE s.key_id = p_key AND s.n = d.n AND s.ticket = d.ticket;
            END IF;
            SELECT count(*) FILTER (WHERE s.holder IS NOT NULL AND s.expires_ms > v_now),
                   min(s.n) FILTER (WHERE s.holder IS NULL OR s.expires_ms <= v_now),
                   coalesce(max(s.n) + 1, 0)
              INTO v_held, v_free, v_next
              FROM memsvc_limit_slots s
             WHERE s.key_id = p_key;
            IF v_held >= p_concurrent THEN
                RETURN QUERY
                SELECT 'concurrent'::text, 1000::bigint, NULL::integer, NULL::bigint,
                       array_agg(s.holder), array_agg(s.n), array_agg(s.ticket)
                  FROM memsvc_limit_slots s
                 WHERE s.key_id = p_key AND s.holder IS NOT NULL AND s.expires_ms > v_now;
                RETURN;
            END IF;
        END IF;

        -- Admitted: only now is anything recorded.
        IF p_per_minute > 0 THEN
            PERFORM memsvc_limit_record(
                p_key, p_per_minute, 1, v_rate.o_first, v_rate.o_last, v_rate.o_at);
        END IF;
        IF p_concurrent > 0 THEN
            IF v_free IS NOT NULL THEN
                UPDATE memsvc_limit_slots s
                   SET holder = p_holder,
                       ticket = greatest(s.ticket + 1, v_now * 1000),
                       expires_ms = v_now + p_ttl_ms
                 WHERE s.key_id = p_key AND s.n = v_free
                RETURNING s.ticket INTO v_ticket;
            END IF;
            IF v_ticket IS NULL THEN  -- every slot is held (or just swept): one more
                v_free := v_next;
                INSERT INTO memsvc_limit_slots (key_id, n, holder, ticket, expires_ms)
                VALUES (p_key, v_free, p_holder, v_now * 1000, v_now + p_ttl_ms)
                RETURNING memsvc_limit_slots.ticket INTO v_ticket;
            END IF;
        END IF;
        RETURN QUERY SELECT NULL::text, 0::bigint, v_free, v_ticket,
            NULL::text[], NULL::integer[], NULL::bigint[];
    END
    $$
    """,
    # Count p_units more calls of p_key, for a call memsvc_limit_acquire
    # admitted whose cost was known only afterwards (it costs 1 + p_units).
    # Refused: refused = 'rate' and nothing more is recorded; retry_after_ms
    # says when a new call of the same cost would be admitted.
    f"""
    CREATE OR REPLACE FUNCTION memsvc_limit_charge(
        p_key text, p_per_minute integer, p_units integer, p_now_ms bigint
    ) RETURNS TABLE (refused text, retry_after_ms bigint)
    LANGUAGE plpgsql VOLATILE
    AS $$
    DECLARE
        v_now bigint;
        v_rate record;
    BEGIN
        IF p_units < 1 OR p_units >= p_per_minute THEN
            RAISE EXCEPTION 'memsvc limits: a call of % units can never fit in % a minute',
                p_units + 1, p_per_minute;
        END IF;
        PERFORM memsvc_limit_lock(p_key);
        v_now := coalesce(p_now_ms, {_NOW_MS});
        SELECT * INTO v_rate
          FROM memsvc_limit_rate(p_key, p_per_minute, p_units, p_units + 1, v_now);
        IF v_rate.o_retry_ms IS NOT NULL THEN
            RETURN QUERY SELECT 'rate'::text, v_rate.o_retry_ms;
            RETURN;
        END IF;
        PERFORM memsvc_limit_record(
            p_key, p_per_minute, p_units, v_rate.o_first, v_rate.o_last, v_rate.o_at);
        RETURN QUERY SELECT NULL::text, 0::bigint;
    END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION memsvc_limit_release(p_key text, p_slot integer, p_ticket bigint)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
    BEGIN
        UPDATE memsvc_limit_slots s
           SET holder = NULL
         WHERE s.key_id = p_key AND s.n = p_slot AND s.ticket = p_ticket
           AND s.holder IS NOT NULL;
        RETURN FOUND;
    END
    $$
    """,
    # The holders of a key's slots held now, and how many each holds.
    f"""
    CREATE OR REPLACE FUNCTION memsvc_limit_holders(p_key text, p_now_ms bigint)
    RETURNS TABLE (holder text, slots bigint)
    LANGUAGE plpgsql VOLATILE
    AS $$
    BEGIN
        RETURN QUERY
        SELECT s.holder, count(*)
          FROM memsvc_limit_slots s
         WHERE s.key_id = p_key AND s.holder IS NOT NULL
           AND s.expires_ms > coalesce(p_now_ms, {_NOW_MS})
         GROUP BY s.holder;
    END
    $$
    """,
    # The rows of keys that made no call for a while (the others clean up
    # after themselves): calls two windows old, slots a minute past their
    # last expiry. Takes no key's lock: nothing it deletes counts any more,
    # and each row is checked again if an acquire changes it meanwhile.
    f"""
    CREATE OR REPLACE FUNCTION memsvc_limit_sweep(p_now_ms bigint)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    AS $$
    DECLARE
        v_now bigint := coalesce(p_now_ms, {_NOW_MS});
        v_calls bigint;
        v_slots bigint;
    BEGIN
        DELETE FROM memsvc_limit_calls c WHERE c.at_ms <= v_now - {_SWEEP_CALLS_AFTER_MS};
        GET DIAGNOSTICS v_calls = ROW_COUNT;
        DELETE FROM memsvc_limit_keys k WHERE k.last_at <= v_now - {_SWEEP_CALLS_AFTER_MS};
        DELETE FROM memsvc_limit_slots s
         WHERE s.expires_ms <= v_now - {_SWEEP_SLOTS_AFTER_MS}
           AND s.key_id IN (
               SELECT i.key_id FROM memsvc_limit_slots i
                GROUP BY i.key_id
               HAVING max(i.expires_ms) <= v_now - {_SWEEP_SLOTS_AFTER_MS});
        GET DIAGNOSTICS v_slots = ROW_COUNT;
        RETURN v_calls + v_slots;
    END
    $$
    """,
]

#: What :data:`SCHEMA` creates: (kind, name), as the store checks its schema.
OBJECTS = frozenset(
    [("table", name) for name in ("memsvc_limit_keys", "memsvc_limit_calls", "memsvc_limit_slots")]
    + [("index", f"{name}_pkey") for name in (
        "memsvc_limit_keys", "memsvc_limit_calls", "memsvc_limit_slots",
    )]
    + [("function", f"memsvc_limit_{name}") for name in (
        "acquire", "charge", "holders", "lock", "rate", "record", "release", "sweep",
    )]
)  # fmt: skip

_ACQUIRE: t.Final = (
    "SELECT refused, retry_after_ms, slot, ticket, holders, slots, tickets"
    " FROM memsvc_limit_acquire(%s::text, %s::integer, %s::integer, %s::text,"
    " %s::bigint, %s::bigint, %s::integer[], %s::bigint[])"
)
_CHARGE: t.Final = (
    "SELECT refused, retry_after_ms"
    " FROM memsvc_limit_charge(%s::text, %s::integer, %s::integer, %s::bigint)"
)
_RELEASE: t.Final = "SELECT memsvc_limit_release(%s::text, %s::integer, %s::bigint)"
_HOLDERS: t.Final = "SELECT holder, slots FROM memsvc_limit_holders(%s::text, %s::bigint)"
_SWEEP: t.Final = "SELECT memsvc_limit_sweep(%s::bigint)"


def install(conn: psycopg.Connection[t.Any]) -> None:
    """Create the limiter's tables and functions if they are missing (idempotent)."""
    with conn.transaction():
        # Two servers installing at once would race on the catalogs.
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('memsvc-limits-install', 0))")
        for statement in SCHEMA:
            conn.execute(statement)


class PgLimiter:
    """Admits or refuses calls per key, consistently across every server sharing a database.

    A drop-in for :class:`memsvc.limits.Limiter`; its tokens are (slot, ticket).
    ``connect`` returns a context manager giving a psycopg connection (a
    pool's ``connection``), in autocommit mode or not but not inside a
    transaction: each call runs as one statement in autocommit mode, so it
    is committed before it returns, and the connection's mode is restored.
    """

    def __init__(
        self,
        connect: Connect,
        *,
        slot_ttl_ms: int = 120_000,
        holder: str | None = None,
        clock: t.Callable[[], int] | None = None,
    ):
        self._connect = connect
        self.slot_ttl_ms = slot_ttl_ms
        #: Milliseconds, instead of the database's clock (for tests).
        self.clock = clock
        self._holder = holder
        self._host = socket.gethostname()

    @property
    def holder(self) -> str:
        """Who this process's slots belong to: ``host:pid`` unless given."""
        # The pid is read each time: a worker forked after the limiter was
        # made holds its slots under its own.
        return self._holder if self._holder is not None else f"{self._host}:{os.getpid()}"

    def acquire(self, key_id: str, limits: Limits) -> tuple[int, int] | None:
        """Admit one call or raise :class:`Refused`; returns the token to :meth:`release`."""
        if not limits.per_minute and not limits.concurrent:
            return None
        now = self.clock() if self.clock is not None else None
        args: list[t.Any] = [
            key_id,
            limits.per_minute,
            limits.concurrent,
            self.holder,
            now,
            self.slot_ttl_ms,
            None,
            None,
        ]
        with self._connect() as conn:
            refused, retry_after_ms, slot, ticket, holders, slots, tickets = self._one(
                conn, _ACQUIRE, args
            )
            if refused == "concurrent":
                # Before refusing: slots of this host's processes that are gone.
                dead = {h for h in set(holders) if self._dead(h)}
                if dead:
                    gone = [i for i, h in enumerate(holders) if h in dead]
                    args[6:] = [[slots[i] for i in gone], [tickets[i] for i in gone]]
                    refused, retry_after_ms, slot, ticket, *_ = self._one(conn, _ACQUIRE, args)
        if refused == "rate":
            raise Refused(
                f"Rate limit exceeded: {limits.per_minute} requests per minute",
                max(1, math.ceil(retry_after_ms / 1000)),
            )
        if refused == "concurrent":
            raise Refused(
                f"Too many concurrent requests: at most {limits.concurrent} at once per API key",
                1,
                "concurrency",
            )
        return None if slot is None else (int(slot), int(ticket))

    def charge(self, key_id: str, limits: Limits, units: int) -> None:
        """Count ``units`` more calls against the rate, for a call :meth:`acquire` admitted.

        As :meth:`memsvc.limits.Limiter.charge`: refused, nothing more is
        recorded, and ``retry_after`` says when a call of the same cost would be
        admitted.
        """
        if units <= 0 or not limits.per_minute:
            return
        check_units(units, limits)
        now = self.clock() if self.clock is not None else None
        with self._connect() as conn:
            refused, retry_after_ms = self._one(
                conn, _CHARGE, [key_id, limits.per_minute, units, now]
            )
        if refused is not None:
            raise Refused(
                f"Rate limit exceeded: {limits.per_minute} requests per minute",
                max(1, math.ceil(retry_after_ms / 1000)),
            )

    def release(self, key_id: str, held: tuple[int, int] | None) -> None:
        """Free the concurrency slot a call held."""
        if held is None:
            return
        slot, ticket = held
        with self._connect() as conn:
            self._one(conn, _RELEASE, [key_id, slot, ticket])

    def executing(self, key_id: str) -> int:
        """How many calls of the key hold a slot now."""
        now = self.clock() if self.clock is not None else None
        with self._connect() as conn:
            rows = self._all(conn, _HOLDERS, [key_id, now])
        return sum(int(count) for holder, count in rows if not self._dead(holder))

    def sweep(self) -> int:
        """Delete rows of keys that made no call for a while; returns how many."""
        now = self.clock() if self.clock is not None else None
        with self._connect() as conn:
            (deleted,) = self._one(conn, _SWEEP, [now])
        return int(deleted)

    # -- internals -----------------------------------------------------------------

    def _one(self, conn: psycopg.Connection[t.Any], query: str, args: list[t.Any]) -> t.Any:
        rows = self._all(conn, query, args)
        assert len(rows) == 1, rows
        return rows[0]

    def _all(self, conn: psycopg.Connection[t.Any], query: str, args: list[t.Any]) -> list[t.Any]:
        """Run one statement in a transaction of its own, committed before returning."""
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise RuntimeError(
                "the limiter needs a connection of its own, not one inside a transaction: "
                "its key locks are held, and its rows unseen, until that transaction ends"
            )
        if conn.autocommit:
            return conn.execute(query, args).fetchall()  # one statement, one transaction
        # The same, one round trip, rather than BEGIN, the call, COMMIT (three),
        # and in the server's default isolation rather than the connection's.
        conn.autocommit = True
        try:
            return conn.execute(query, args).fetchall()
        finally:
            with contextlib.suppress(psycopg.Error):  # a broken connection: the pool drops it
                conn.autocommit = False

    def _dead(self, holder: str) -> bool:
        """Whether ``holder`` is a process of this host that no longer exists."""
        host, _, pid_text = holder.rpartition(":")
        if host != self._host or not (pid_text.isascii() and pid_text.isdigit()):
            return False  # another box's: it frees its slots at expiry
        pid = int(pid_text)
        if pid <= 0 or pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except (PermissionError, OverflowError):
            return False  # exists (someone else's), or not a pid at all
        return False


__all__ = ["SCHEMA", "PgLimiter", "install"]

"""What extraction asks of a store: :class:`Jobs`.

A job is a row of its own, written in the transaction that stores the
messages it reads; workers claim due jobs under a lease and settle each
once (see :mod:`.job_sql`, the SQL both stores share).
"""

from __future__ import annotations

import abc
import typing as t

from ..models import Job
from ..models import Memory

_DAY_MS = 86_400_000


def day_of(ms: int) -> int:
    """The UTC day (days since 1970-01-01) of a time: what a daily budget counts in."""
    return ms // _DAY_MS


class Jobs(abc.ABC):
    """Extraction jobs, tokens spent per tenant and day, and a fact's supersession."""

    @abc.abstractmethod
    def insert_job(self, job: Job) -> None:
        """Queue a job (inside write(): with the messages it reads)."""

    @abc.abstractmethod
    def get_job(self, tenant: str, job_id: str) -> Job | None: ...

    @abc.abstractmethod
    def list_jobs(
        self,
        tenant: str,
        limit: int,
        *,
        user_id: str | None = None,
        status: str | None = None,
        after: str | None = None,
    ) -> list[Job] | None:
        """A page of the tenant's jobs, newest first; None if ``after`` is no job of theirs."""

    @abc.abstractmethod
    def claim_jobs(
        self,
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
        """Due jobs made ``running`` under ``owner``'s lease, attempts counted (inside write()).

        At most ``limit``, and never more than ``max_running`` running on
        ``box`` at once. A job whose lease ran out (its worker died) is due
        again. A job of a tenant past ``daily_tokens`` today waits until the
        next UTC day, its ``error`` saying why. A job whose lease ran out after
        its ``max_attempts``-th claim (its worker died that often on it) fails
        instead of being claimed again.
        """

    @abc.abstractmethod
    def job_reading(self, tenant: str, user_id: str, memory_id: str) -> Job | None:
        """The newest of the user's jobs that reads this message, if any."""

    @abc.abstractmethod
    def jobs_due(self, now: int) -> bool:
        """Whether any job is due (a read: what a worker asks before it claims)."""

    @abc.abstractmethod
    def job_held(self, job_id: str, owner: str) -> Job | None:
        """The job, if it is still running under ``owner``'s lease (inside write(): it stays so)."""

    @abc.abstractmethod
    def settle_job(
        self,
        job_id: str,
        now: int,
        *,
        status: str,
        error: str | None = None,
        facts: dict[str, t.Any] | None = None,
        run_after: int | None = None,
        tokens: tuple[int, int] = (0, 0),
    ) -> None:
        """A held job's outcome (inside write()); its tokens added to it and to its tenant's day."""

    @abc.abstractmethod
    def retry_job(self, tenant: str, job_id: str, now: int) -> Job | None:
        """A failed job queued again, its attempts from zero; None if the tenant has no such job.

        A job that is not failed is answered as it is.
        """

    @abc.abstractmethod
    def tokens_on(self, tenant: str, day: int) -> int:
        """The model tokens (prompt and completion) the tenant has spent on a UTC day."""

    @abc.abstractmethod
    def purge_jobs(self, before: int, limit: int) -> int:
        """Delete at most ``limit`` jobs that ended (``done`` or ``failed``) before ``before``,
        and the token counts of days before its day; how many jobs went."""

    @abc.abstractmethod
    def job_counts(self) -> dict[str, int]:
        """How many jobs there are of each status."""

    @abc.abstractmethod
    def user_memories(
        self, tenant: str, user_id: str, ids: t.Sequence[str], now: int
    ) -> list[tuple[int, Memory]]:
        """The visible memories of the user with these ids, with their seqs, in the order given."""

    @abc.abstractmethod
    def current_facts(self, tenant: str, user_id: str, now: int) -> list[tuple[int, Memory]]:
        """The user's visible facts that nothing has superseded, with their seqs."""

    @abc.abstractmethod
    def facts_replaced_by(
        self, tenant: str, user_id: str, fact_id: str, limit: int, now: int
    ) -> list[Memory]:
        """At most ``limit`` of the user's visible facts ``fact_id`` superseded, oldest first."""

    @abc.abstractmethod
    def record_event(self, seq: int, version: int, event: str) -> None:
        """How a memory's version came about, when it is not an add or an update."""

    @abc.abstractmethod
    def events(self, seq: int) -> dict[int, str]:
        """The recorded events of a memory's versions, by version."""

    @abc.abstractmethod
    def sessions_of_messages(
        self, tenant: str, user_id: str | None
    ) -> list[tuple[str, str, list[str]]]:
        """(user, session, message ids in position order) of the tenant's (or a user's) messages."""

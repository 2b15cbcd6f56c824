"""The asynchronous client, :class:`AsyncMemsvc`, for asyncio (sleeping and locking via anyio).

It is the source of the synchronous client too: ``clients/python/tools/async_to_sync.py``
writes ``client.py`` from it. Edit this file, then run that script.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing as t
import urllib.parse

import anyio
import httpx

from . import _core
from ._core import USER_AGENT
from ._core import Call
from ._core import Kind
from ._core import Message
from ._core import Mode
from ._core import api_key_from
from ._core import check_url
from ._core import recommended
from .errors import JobTimeout
from .errors import MemsvcError
from .errors import NotFound
from .models import UNSET
from .models import EndUser
from .models import Ingested
from .models import Job
from .models import JobStatus
from .models import Memory
from .models import Session
from .models import Unset


class AsyncMemsvc:
    """A memsvc client for async code: the methods of :class:`Memsvc`, as coroutines."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        default_mode: Mode = _core.DEFAULT_MODE,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._base = check_url(url)
        self._default_mode = _core.check_mode(default_mode)
        key = api_key_from(api_key)
        self._headers = {"x-api-key": key, "user-agent": USER_AGENT}
        self._post_headers = {**self._headers, "content-type": "application/json"}
        self._timeout = timeout
        self._policy = _core.RetryPolicy(max_retries=max_retries, max_retry_wait=max_retry_wait)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.AsyncClient()
        self._recommended: float | None | Unset = UNSET
        # Made on first use: an anyio lock belongs to the event loop running then.
        self._lock: anyio.Lock | None = None

    @property
    def default_mode(self) -> Mode:
        """The mode of a search that names none."""
        return self._default_mode

    def __repr__(self) -> str:
        # Never the key.
        return f"AsyncMemsvc({self._base!r})"

    # -- lifecycle ---------------------------------------------------------------

    async def close(self) -> None:
        """Close the connections (not those of an ``http_client`` passed in)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncMemsvc:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        await self.close()

    # -- memories ----------------------------------------------------------------

    async def add(
        self,
        user_id: str,
        content: str,
        *,
        metadata: t.Mapping[str, t.Any] | None = None,
        expires_at: datetime.datetime | None = None,
        dedupe: bool = False,
        occurred_at: datetime.datetime | None = None,
    ) -> Memory:
        """Store a memory for an end user; with ``dedupe`` an identical one is returned instead.

        ``occurred_at``: when it happened, if not now (backfill).
        """
        call = _core.add_call(user_id, content, metadata, expires_at, dedupe, occurred_at)
        return Memory.from_wire(await self._call(call))

    async def ingest(
        self,
        user_id: str,
        messages: t.Sequence[Message | t.Mapping[str, t.Any]],
        *,
        session_id: str | None = None,
        metadata: t.Mapping[str, t.Any] | None = None,
        extract: bool | None = None,
        wait: bool = False,
        wait_timeout: float = 30.0,
    ) -> Ingested:
        """Store a conversation's messages as they were said, all or none.

        ``messages``: ``{"role", "content", "name"?, "at"?, "id"?}`` each, as
        chat APIs write them. ``session_id`` None: a new session; the same id
        again continues it. A message whose ``id`` the session already holds
        is not stored twice, so a call whose messages all have ids is sent
        again safely after a lost answer.

        ``extract``: also draw facts from the new messages with the server's
        model (None: the server's ``MEMSVC_EXTRACT``); the answer's ``job``
        is the extraction job. ``wait``: return once that job is done or
        failed, with the job as it settled (:class:`JobTimeout` after
        ``wait_timeout`` seconds; the messages are stored either way).
        """
        if wait:
            _core.check_wait(wait_timeout, _core.JOB_POLL_INTERVAL)
        call = _core.ingest_call(user_id, messages, session_id, metadata, extract)
        out = _core.ingested(await self._call(call))
        if wait and out.job is not None:
            settled = await self.wait_for_job(out.job.id, timeout=wait_timeout)
            out = dataclasses.replace(out, job=settled)
        return out

    async def job(self, job_id: str) -> Job:
        """An extraction job of the key's tenant (:class:`NotFound` for any other id)."""
        return _core.job(await self._call(_core.job_call(job_id)))

    async def jobs(
        self,
        *,
        user_id: str | None = None,
        status: JobStatus | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> list[Job]:
        """A page of the tenant's extraction jobs, newest first, after ``cursor`` (a job id).

        ``user_id``, ``status``: only that end user's, only in that status.
        """
        return _core.jobs(await self._call(_core.jobs_call(user_id, status, limit, cursor)))

    async def iter_jobs(
        self,
        *,
        user_id: str | None = None,
        status: JobStatus | None = None,
        page_size: int = 100,
    ) -> t.AsyncIterator[Job]:
        """Every extraction job of the tenant, newest first, page by page (``async for``)."""
        cursor: str | None = None
        while True:
            page = await self.jobs(user_id=user_id, status=status, limit=page_size, cursor=cursor)
            for job in page:
                yield job
            if len(page) < page_size:
                return
            cursor = page[-1].id

    async def retry_job(self, job_id: str) -> Job:
        """Queue a ``failed`` job again, its attempts from zero; any other job is answered as is."""
        return _core.job(await self._call(_core.retry_job_call(job_id)))

    async def wait_for_job(
        self,
        job_id: str,
        *,
        timeout: float = 30.0,
        interval: float = _core.JOB_POLL_INTERVAL,
    ) -> Job:
        """The job once it is ``done`` or ``failed``, looked at every ``interval`` seconds.

        A failed job is returned, not raised: its ``error`` says why, and
        :meth:`retry_job` queues it again. :class:`JobTimeout` (a
        ``TimeoutError``) if it has not settled after ``timeout`` seconds.
        """
        _core.check_wait(timeout, interval)
        deadline = _core.monotonic() + timeout
        while True:
            job = await self.job(job_id)
            if job.settled:
                return job
            left = deadline - _core.monotonic()
            if left <= 0:
                raise JobTimeout(job, timeout)
            await anyio.sleep(min(interval, left))

    async def sessions(
        self, user_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> list[Session]:
        """A page of the user's sessions, the one with the latest message first.

        ``cursor``: the last ``session_id`` of the previous page.
        """
        return _core.sessions(await self._call(_core.sessions_call(user_id, limit, cursor)))

    async def iter_sessions(
        self, user_id: str, *, page_size: int = 100
    ) -> t.AsyncIterator[Session]:
        """Every session of the user, latest first, page by page (``async for``)."""
        cursor: str | None = None
        while True:
            page = await self.sessions(user_id, limit=page_size, cursor=cursor)
            for found in page:
                yield found
            if len(page) < page_size:
                return
            cursor = page[-1].session_id

    async def session(
        self,
        user_id: str,
        session_id: str,
        *,
        limit: int | None = None,
        after: int | None = None,
    ) -> list[Memory]:
        """A page of one session's messages, oldest first, after position ``after``.

        :class:`NotFound` for a session the user does not have.
        """
        call = _core.session_call(user_id, session_id, limit, after)
        return _core.memories(await self._call(call))

    async def iter_session(
        self, user_id: str, session_id: str, *, page_size: int = 100
    ) -> t.AsyncIterator[Memory]:
        """Every message of a session in order, page by page (``async for``)."""
        after: int | None = None
        while True:
            page = await self.session(user_id, session_id, limit=page_size, after=after)
            for message in page:
                yield message
            if len(page) < page_size:
                return
            after = page[-1].position

    async def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int | None = None,
        threshold: float | None = None,
        filter: t.Mapping[str, t.Any] | None = None,
        mode: Mode | None = None,
        explain: bool = False,
        created_after: datetime.datetime | None = None,
        created_before: datetime.datetime | None = None,
        kinds: t.Collection[Kind] | None = None,
        occurred_after: datetime.datetime | None = None,
        occurred_before: datetime.datetime | None = None,
        as_of: datetime.datetime | None = None,
        include_superseded: bool = False,
        context: int | None = None,
        time: t.Literal["on", "off"] | None = None,
        now: datetime.datetime | None = None,
    ) -> list[Memory]:
        """The user's memories that best match ``query``, best first.

        ``mode`` None: the client's ``default_mode`` (hybrid unless set).
        ``threshold`` None: in semantic and hybrid mode, the threshold the
        deployment recommends for its model (service.info, asked once); in
        keyword mode, no floor. ``explain``: each result's ``explain`` says
        why it ranked where it did. ``kinds``, ``occurred_*``, ``as_of``,
        ``include_superseded``: which memories take part. ``context``: up to
        that many messages of each message's session on either side, in its
        ``context``. ``time``: whether a time in the query ("last week")
        ranks memories of that time higher (default: on in hybrid mode),
        resolved against ``now`` (default: the time of the call).
        """
        mode = self._default_mode if mode is None else mode
        if threshold is None and _core.floor_by_default(mode):
            threshold = await self._default_threshold("memory.search")
        scope = _core.Scope(kinds, occurred_after, occurred_before, as_of, include_superseded)
        call = _core.search_call(
            user_id,
            query,
            limit,
            threshold,
            filter,
            mode,
            explain,
            created_after,
            created_before,
            scope,
            context,
            time,
            now,
        )
        return _core.memories(await self._call(call))

    async def get_all(
        self,
        user_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        filter: t.Mapping[str, t.Any] | None = None,
        created_after: datetime.datetime | None = None,
        created_before: datetime.datetime | None = None,
        kinds: t.Collection[Kind] | None = None,
        occurred_after: datetime.datetime | None = None,
        occurred_before: datetime.datetime | None = None,
        as_of: datetime.datetime | None = None,
        include_superseded: bool = False,
    ) -> list[Memory]:
        """One page of the user's memories, newest first, after ``cursor`` (a memory id)."""
        scope = _core.Scope(kinds, occurred_after, occurred_before, as_of, include_superseded)
        call = _core.get_all_call(
            user_id, limit, cursor, filter, created_after, created_before, scope
        )
        return _core.memories(await self._call(call))

    async def iter_all(
        self,
        user_id: str,
        *,
        page_size: int = 100,
        filter: t.Mapping[str, t.Any] | None = None,
        created_after: datetime.datetime | None = None,
        created_before: datetime.datetime | None = None,
        kinds: t.Collection[Kind] | None = None,
        occurred_after: datetime.datetime | None = None,
        occurred_before: datetime.datetime | None = None,
        as_of: datetime.datetime | None = None,
        include_superseded: bool = False,
    ) -> t.AsyncIterator[Memory]:
        """Every memory of the user, newest first, fetched page by page (``async for``)."""
        cursor: str | None = None
        while True:
            page = await self.get_all(
                user_id,
                limit=page_size,
                cursor=cursor,
                filter=filter,
                created_after=created_after,
                created_before=created_before,
                kinds=kinds,
                occurred_after=occurred_after,
                occurred_before=occurred_before,
                as_of=as_of,
                include_superseded=include_superseded,
            )
            for memory in page:
                yield memory
            if len(page) < page_size:
                return  # a short page is the last: no call for the empty one
            cursor = page[-1].id

    async def users(
        self, *, limit: int | None = None, cursor: str | None = None, prefix: str | None = None
    ) -> list[EndUser]:
        """A page of the tenant's end users with memories, by id, after ``cursor`` (a user id).

        ``prefix``: only users whose id starts with it.
        """
        return _core.end_users(await self._call(_core.users_call(limit, cursor, prefix)))

    async def iter_users(
        self, *, page_size: int = 100, prefix: str | None = None
    ) -> t.AsyncIterator[EndUser]:
        """Every end user of the tenant who has memories, by id, page by page (``async for``)."""
        cursor: str | None = None
        while True:
            page = await self.users(limit=page_size, cursor=cursor, prefix=prefix)
            for user in page:
                yield user
            if len(page) < page_size:
                return
            cursor = page[-1].user_id

    async def get(self, memory_id: str, *, user_id: str | None = None) -> Memory:
        """The memory with this id (:class:`NotFound` outside the key's tenant).

        With ``user_id``, :class:`NotFound` too when it is another end user's.
        """
        call = Call("memory.getById", _core.by_id(memory_id, user_id))
        return Memory.from_wire(await self._call(call))

    async def update(
        self,
        memory_id: str,
        *,
        content: str | Unset = UNSET,
        metadata: t.Mapping[str, t.Any] | None | Unset = UNSET,
        expires_at: datetime.datetime | None | Unset = UNSET,
        user_id: str | None = None,
        occurred_at: datetime.datetime | None | Unset = UNSET,
    ) -> Memory:
        """Change a memory's content, metadata (None: clear), expiry (None: never) or time
        (None: its creation time again).

        With ``user_id``, only if the memory is that end user's (else :class:`NotFound`).
        """
        call = _core.update_call(memory_id, content, metadata, expires_at, user_id, occurred_at)
        return Memory.from_wire(await self._call(call))

    async def history(
        self, memory_id: str, *, user_id: str | None = None
    ) -> list[dict[str, t.Any]]:
        """The memory's versions, oldest first, as the server gives them."""
        answer = await self._call(Call("memory.history", _core.by_id(memory_id, user_id)))
        return t.cast(list[dict[str, t.Any]], answer)

    async def delete(self, memory_id: str, *, user_id: str | None = None) -> None:
        """Delete a memory for good (with ``user_id``: only if it is that end user's)."""
        await self._call(_core.mutation("memory.delete", _core.by_id(memory_id, user_id)))

    async def delete_all(self, user_id: str) -> int:
        """Delete every memory of the user; returns how many there were."""
        answer = await self._call(_core.mutation("memory.deleteAll", {"userId": user_id}))
        return int(answer["deleted"])

    async def info(self) -> dict[str, t.Any]:
        """service.info: the deployment's version, model, defaults and this key's limits."""
        info = t.cast(dict[str, t.Any], await self._call(_core.INFO))
        self._recommended = recommended(info)
        return info

    # -- internals ---------------------------------------------------------------

    async def _default_threshold(self, procedure: str) -> float | None:
        """The deployment's recommended threshold, for the caller's ``procedure``.

        Asked of service.info once; a failure to ask is ``procedure``'s error.
        """
        if isinstance(self._recommended, Unset):
            if self._lock is None:
                self._lock = anyio.Lock()
            async with self._lock:  # one service.info for all the tasks that get here
                if isinstance(self._recommended, Unset):
                    try:
                        await self.info()
                    except NotFound:
                        self._recommended = None  # a server without service.info
                    except MemsvcError as err:
                        raise _core.as_error_of(err, procedure) from None
        assert not isinstance(self._recommended, Unset)
        return self._recommended

    async def _call(self, call: Call) -> t.Any:
        attempt = 0
        while True:
            try:
                response = await self._send(call)
                return _core.result(call, response.status_code, response.headers, response.content)
            except MemsvcError as err:
                wait = self._policy.delay(call, attempt, err)
                if wait is None:
                    raise
                self._policy.log(call, attempt, err, wait)
                await anyio.sleep(wait)
                attempt += 1

    async def _send(self, call: Call) -> httpx.Response:
        url = f"{self._base}/{call.procedure}"
        try:
            if call.mutation:
                return await self._http.post(
                    url, content=call.body(), headers=self._post_headers, timeout=self._timeout
                )
            query = urllib.parse.quote(call.body(), safe="")
            return await self._http.get(
                f"{url}?input={query}", headers=self._headers, timeout=self._timeout
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # No connection was made (or none was free): nothing was sent.
            raise _core.connection_failed(call, exc, request_sent=False) from exc
        except httpx.TransportError as exc:
            # Sent, at least in part, and no answer: it may have been applied.
            raise _core.connection_failed(call, exc, request_sent=True) from exc

"""Typed errors: every failed call raises a :class:`MemsvcError` subclass."""

from __future__ import annotations

import typing as t

if t.TYPE_CHECKING:
    from .models import Job


class MemsvcError(Exception):
    """A call that failed; ``code`` is memsvc's string code (``"NOT_FOUND"``)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        http_status: int | None,
        path: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        #: The HTTP status; ``None`` when no answer arrived (:class:`ConnectionFailed`).
        self.http_status = http_status
        #: The procedure that failed, e.g. ``"memory.getById"``.
        self.path = path
        #: Seconds the server asked to wait (``Retry-After``), when it did.
        self.retry_after = retry_after

    def __str__(self) -> str:
        status = f" {self.http_status}" if self.http_status is not None else ""
        where = f" on {self.path}" if self.path else ""
        return f"{self.code}{status}{where}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, code={self.code!r}, "
            f"http_status={self.http_status!r}, path={self.path!r})"
        )


class BadRequest(MemsvcError):
    """The request was refused as invalid (400, 405, 413, 415): retrying cannot help."""


class Unauthorized(MemsvcError):
    """Missing, unknown or revoked API key (401)."""


class NotFound(MemsvcError):
    """No such memory in the caller's tenant, or no such procedure (404)."""


class RateLimited(MemsvcError):
    """A limit of the key was reached (429) and the retries allowed were used up."""

    retry_after: float


class ServerError(MemsvcError):
    """The server failed (5xx): the embedding provider, or a full waiting room (503)."""


class ConnectionFailed(MemsvcError):
    """No answer arrived: the connection failed or timed out (``http_status`` is ``None``)."""

    def __init__(self, message: str, *, path: str | None, request_sent: bool) -> None:
        super().__init__(message, code="CONNECTION_FAILED", http_status=None, path=path)
        #: True when the request may have reached the server before the
        #: connection failed: a write may then have been applied.
        self.request_sent = request_sent


class JobTimeout(MemsvcError, TimeoutError):
    """A job did not settle (``done`` or ``failed``) within ``wait_for_job``'s timeout.

    Not a failure of the job: it goes on on the server; ``job`` is how it
    was last seen, and waiting again is fine.
    """

    def __init__(self, job: Job, timeout: float) -> None:
        super().__init__(
            f"extraction job {job.id} still {job.status} after {timeout:g}s "
            f"({job.attempts} attempts{'; ' + job.error if job.error else ''})",
            code="JOB_TIMEOUT",
            http_status=None,
            path="memory.job",
        )
        #: The job as last seen.
        self.job = job
        self.timeout = timeout


_BY_CODE: dict[str, type[MemsvcError]] = {
    "BAD_REQUEST": BadRequest,
    "METHOD_NOT_SUPPORTED": BadRequest,
    "PAYLOAD_TOO_LARGE": BadRequest,
    "UNSUPPORTED_MEDIA_TYPE": BadRequest,
    "UNAUTHORIZED": Unauthorized,
    "NOT_FOUND": NotFound,
    "TOO_MANY_REQUESTS": RateLimited,
}


def error_class(code: str, http_status: int) -> type[MemsvcError]:
    """The error class for a code, falling back on the HTTP status for codes not listed."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    if http_status >= 500:
        return ServerError
    if http_status == 429:
        return RateLimited
    if http_status == 404:
        return NotFound
    if http_status == 401:
        return Unauthorized
    if 400 <= http_status < 500:
        return BadRequest
    return MemsvcError


__all__ = [
    "MemsvcError",
    "BadRequest",
    "Unauthorized",
    "NotFound",
    "RateLimited",
    "ServerError",
    "ConnectionFailed",
    "JobTimeout",
]

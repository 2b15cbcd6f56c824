"""Errors that reach the caller, each carrying its tRPC error code.

These are plain exceptions: services and the store raise them without
knowing about HTTP. The wire layer (:mod:`memsvc.api.trpc`) turns any of them
into the error envelope, with the status from :data:`HTTP_STATUS`.
"""

from __future__ import annotations

HTTP_STATUS = {
    "BAD_REQUEST": 400,
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "METHOD_NOT_SUPPORTED": 405,
    "TIMEOUT": 408,
    "PAYLOAD_TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "TOO_MANY_REQUESTS": 429,
    "INTERNAL_SERVER_ERROR": 500,
    "SERVICE_UNAVAILABLE": 503,
}


class ApiError(Exception):
    """An error with a message that is safe to show to the caller."""

    code = "INTERNAL_SERVER_ERROR"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return HTTP_STATUS[self.code]


class BadRequest(ApiError):
    code = "BAD_REQUEST"


class Unauthorized(ApiError):
    code = "UNAUTHORIZED"


class Forbidden(ApiError):
    code = "FORBIDDEN"


class NotFound(ApiError):
    code = "NOT_FOUND"


class MethodNotSupported(ApiError):
    code = "METHOD_NOT_SUPPORTED"


class PayloadTooLarge(ApiError):
    code = "PAYLOAD_TOO_LARGE"


class UnsupportedMediaType(ApiError):
    code = "UNSUPPORTED_MEDIA_TYPE"


class TooManyRequests(ApiError):
    code = "TOO_MANY_REQUESTS"

    def __init__(
        self, message: str, *, headers: dict[str, str] | None = None, reason: str = "rate"
    ):
        super().__init__(message, headers=headers)
        #: Which limit refused the call (the metrics' label): rate, concurrency,
        #: cost (a long text's windows) or tenant_keys (the keys router's own).
        self.reason = reason


class InternalError(ApiError):
    code = "INTERNAL_SERVER_ERROR"


class ServiceUnavailable(ApiError):
    code = "SERVICE_UNAVAILABLE"


def for_code(code: str, message: str) -> ApiError:
    """The error of this tRPC code, e.g. ``for_code("NOT_FOUND", "...")``."""
    for cls in ApiError.__subclasses__():
        if cls.code == code:
            return cls(message)
    return InternalError(message)


class ConfigError(Exception):
    """A setting is missing or invalid; the message names the setting."""

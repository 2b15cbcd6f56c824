"""Errors that reach the caller, each carrying its tRPC error code.

These are plain exceptions: services and the store raise them without
knowing about HTTP. The wire layer (:mod:`memsvc.api.trpc`) turns any of them
into the error envelope, with the status from :data:`HTTP_STATUS`.

:class:`ErrorEnvelope` is that envelope, the one every error memsvc writes
is in: the API's, the worker's refusals of requests it cannot parse
(:mod:`memsvc.serving.worker`), the metrics address's
(:mod:`memsvc.serving.metrics_server`).
"""

from __future__ import annotations

import dataclasses
import http
import json
import typing as t

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


#: Compact, UTF-8 as is (as :data:`memsvc.wire.ENCODER`, which this module may not import).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class ErrorEnvelope:
    """``{"error": {"message", "code", "data": {"code", "httpStatus", "path"?}}}``, as tRPC's.

    ``path``: the procedure a call of a request named (None for a request
    refused as a whole).
    """

    code: str
    message: str
    path: str | None = None

    @classmethod
    def of(cls, error: ApiError, path: str | None = None) -> ErrorEnvelope:
        return cls(error.code, error.message, path)

    @property
    def status(self) -> int:
        return HTTP_STATUS[self.code]

    @property
    def status_line(self) -> str:
        """``"404 Not Found"``: the status and its reason phrase."""
        return f"{self.status} {http.HTTPStatus(self.status).phrase}"

    def json(self) -> dict[str, t.Any]:
        data: dict[str, t.Any] = {"code": self.code, "httpStatus": self.status}
        if self.path is not None:
            data["path"] = self.path
        # A message may quote the input: never text that UTF-8 cannot carry (a
        # lone surrogate), which would fail the whole answer, a batch's too.
        message = self.message.encode("utf-8", "backslashreplace").decode("utf-8")
        return {"error": {"message": message, "code": self.code, "data": data}}

    def text(self) -> str:
        return _ENCODER.encode(self.json())

    def body(self) -> bytes:
        return self.text().encode("utf-8")

    @staticmethod
    def headers() -> list[tuple[str, str]]:
        """What any answer carrying it says of itself (no cache may keep an error either)."""
        return [("Content-Type", "application/json"), ("Cache-Control", "no-store")]


class ConfigError(Exception):
    """A setting is missing or invalid; the message names the setting."""

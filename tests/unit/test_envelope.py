"""One error envelope for every answer memsvc writes: the API's, the worker's, the metrics
address's, built in one place (memsvc.errors.ErrorEnvelope)."""

from __future__ import annotations

import json

import pytest

from memsvc.api.trpc import error_body
from memsvc.errors import HTTP_STATUS
from memsvc.errors import ApiError
from memsvc.errors import ErrorEnvelope
from memsvc.serving import metrics_server
from memsvc.serving.worker import error_response


@pytest.mark.parametrize("code", sorted(HTTP_STATUS))
def test_the_api_and_the_worker_write_the_same_envelope(code):
    message = "Something \u00e9 went wrong"
    api = error_body(type("Refused", (ApiError,), {"code": code})(message), None)
    raw = error_response(code, message)
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n")[0].decode()
    assert json.loads(body) == api == ErrorEnvelope(code, message).json()
    assert status_line == f"HTTP/1.1 {ErrorEnvelope(code, message).status_line}"
    assert b"\r\nCache-Control: no-store\r\n" in head
    assert api["error"]["data"]["httpStatus"] == HTTP_STATUS[code]


def test_the_metrics_address_writes_it_too():
    answers = []
    serve = metrics_server.app(token="t" * 16)
    body = b"".join(
        serve(
            {"PATH_INFO": "/metrics", "REQUEST_METHOD": "GET"},
            lambda status, headers: answers.append((status, dict(headers))),
        )
    )
    status, headers = answers[0]
    expected = ErrorEnvelope(
        "UNAUTHORIZED", "Missing or wrong bearer token for /metrics (MEMSVC_METRICS_TOKEN)"
    )
    assert status == expected.status_line == "401 Unauthorized"
    assert json.loads(body) == expected.json()
    assert headers["Cache-Control"] == "no-store" and headers["WWW-Authenticate"] == "Bearer"


def test_a_path_and_an_unencodable_message():
    envelope = ErrorEnvelope("NOT_FOUND", "no \ud800 here", "memory.getById")
    assert envelope.json()["error"]["data"] == {
        "code": "NOT_FOUND",
        "httpStatus": 404,
        "path": "memory.getById",
    }
    assert envelope.json()["error"]["message"] == "no \\ud800 here"
    envelope.body()  # encodes

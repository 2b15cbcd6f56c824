"""How the gunicorn worker words the requests gunicorn refuses."""

import json
import ssl
import types

import pytest
from gunicorn.http import errors

from memsvc.serving.worker import classify
from memsvc.serving.worker import error_response

CFG = types.SimpleNamespace(limit_request_fields=100, limit_request_field_size=32768)


@pytest.mark.parametrize(
    "exc, code, message",
    [
        (errors.InvalidRequestLine("GET sk_memsvc_x"), "BAD_REQUEST", "Malformed request line"),
        (errors.InvalidHeader("x-api-key sk_memsvc_secret"), "BAD_REQUEST", "Malformed header"),
        (
            errors.LimitRequestHeaders("limit request headers fields size"),
            "BAD_REQUEST",
            "Request header fields too large (at most 100 headers of at most 32768 bytes each)",
        ),
        (errors.ForbiddenProxyRequest("10.0.0.1"), "FORBIDDEN", "Request forbidden"),
        (errors.InvalidResponseHeader("'X'"), "INTERNAL_SERVER_ERROR", "Internal server error"),
        (errors.ConfigurationProblem("x"), "INTERNAL_SERVER_ERROR", "Internal server error"),
        (ValueError("sk_memsvc_secret"), "INTERNAL_SERVER_ERROR", "Internal server error"),
        (ssl.SSLError(1, "bad"), "BAD_REQUEST", "TLS error"),
    ],
)
def test_refusals_are_classified_without_quoting_the_request(exc, code, message):
    assert classify(exc, CFG) == (code, message)


def test_error_response_is_a_complete_http_answer_in_the_envelope():
    raw = error_response("BAD_REQUEST", "Malformed request line")
    head, body = raw.split(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request"
    assert b"Content-Length: %d" % len(body) in head
    assert b"Connection: close" in head
    assert json.loads(body) == {
        "error": {
            "message": "Malformed request line",
            "code": "BAD_REQUEST",
            "data": {"code": "BAD_REQUEST", "httpStatus": 400},
        }
    }

"""Requests gunicorn cannot parse are still answered in memsvc's error envelope."""

from __future__ import annotations

import json
import socket

import pytest

pytestmark = pytest.mark.e2e


def send_raw(server, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are; the status, headers and body of the answer.

    Also checks that nothing follows that answer on the connection: a second
    answer would be taken by a keep-alive client for its next request's.
    """
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers["content-length"])
    body, extra = rest[:length], rest[length:]
    assert extra == b"", f"more than one answer: {answer!r}"
    return int(status_line.split()[1]), headers, body


def request(*header_lines: str, line: str = "GET /trpc/memory.getAll HTTP/1.1", body=b"") -> bytes:
    head = "\r\n".join([line, "Host: localhost", *header_lines]) + "\r\n\r\n"
    return head.encode("latin-1") + body


CASES = {
    "request line": (b"GARBAGE\r\n\r\n", "Malformed request line"),
    "HTTP version": (request(line="GET / HTTP/9.9"), "Unsupported HTTP version"),
    "header without a colon": (request("x-api-key sk_memsvc_0123"), "Malformed header"),
    "header name": (request("bad header: 1"), "Malformed header name"),
    "folded header": (request("x-a: 1", " folded"), "Folded (multi-line) headers"),
    "header over the size limit": (
        request("x-big: " + "a" * 40000),
        "Request header fields too large",
    ),
    "Content-Length and Transfer-Encoding": (
        request(
            "Content-Type: application/json",
            "Content-Length: 2",
            "Transfer-Encoding: chunked",
            line="POST /trpc/memory.add HTTP/1.1",
            body=b"0\r\n\r\n",
        ),
        "Malformed header",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_unparseable_request_gets_the_error_envelope(server, case):
    raw, message = CASES[case]
    status, headers, body = send_raw(server, raw)
    assert status == 400, body
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    error = json.loads(body)["error"]
    assert error["code"] == "BAD_REQUEST"
    assert error["data"] == {"code": "BAD_REQUEST", "httpStatus": 400}
    assert error["message"].startswith(message), error["message"]


def broken_chunks(*header_lines: str) -> bytes:
    return request(
        *header_lines,
        "Content-Type: application/json",
        "Transfer-Encoding: chunked",
        line="POST /trpc/memory.add HTTP/1.1",
        body=b"zz\r\n{}\r\n0\r\n\r\n",
    )


def test_a_malformed_chunked_body_is_a_400_from_memsvc(server):
    # memsvc reads a body only once the key is accepted; the read fails.
    status, headers, body = send_raw(server, broken_chunks(f"x-api-key: {server.create_key()}"))
    assert status == 400
    assert json.loads(body)["error"] == {
        "message": "Malformed request body",
        "code": "BAD_REQUEST",
        "data": {"code": "BAD_REQUEST", "httpStatus": 400, "path": "memory.add"},
    }


def test_a_malformed_body_left_unread_gets_one_answer(server):
    # Refused before its body is read; gunicorn then finds the body broken
    # while skipping it, and must not answer a second time.
    status, _, body = send_raw(server, broken_chunks())
    assert status == 401
    assert json.loads(body)["error"]["code"] == "UNAUTHORIZED"


def test_refusals_quote_nothing_of_the_request(server):
    secret = "sk_memsvc_" + "5" * 64
    status, _, body = send_raw(server, request(f"x-api-key {secret}"))
    assert status == 400
    assert b"5555" not in body
    assert secret not in server.output()
    assert "Refused request from ip=127.0.0.1: InvalidHeader" in server.output()


def test_the_server_keeps_serving_after_refusals(server):
    send_raw(server, b"GARBAGE\r\n\r\n")
    status, _, body = send_raw(server, request(line="GET /health HTTP/1.1"))
    assert status == 200
    assert json.loads(body)["status"] == "ok"

"""Helpers for the client's tests: texts, keys with their ids, request recording, a lossy
proxy, the documents' code blocks."""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import threading
import typing as t

import httpx
from memsvc_server import Server

#: The memsvc repository the client lives in: its guide is tested too.
REPO = pathlib.Path(__file__).resolve().parents[3]

# Texts whose similarities with the bundled model put them on either side of
# the thresholds that matter: the recommended 0.35 and the wire's default 0.7.

#: A memory and a natural question about it: cosine about 0.54, so found with
#: the recommended threshold and missed with 0.7.
BEES = "Dan keeps bees in his garden"
PETS = "Does Dan have any pets?"
#: A memory holding a word whose cosine with it is about 0.26: under any
#: default floor, found by a keyword search only.
BUDGET = (
    "The quarterly budget review moved to Thursday and the projections need a second pass; "
    "bring the zebra folder"
)
ZEBRA = "zebra"
RECOMMENDED = 0.35
WIRE_DEFAULT = 0.7


def create_key(server: Server, tenant: str) -> tuple[str, str]:
    """A new API key's record id and secret, through keys.create."""
    resp = httpx.post(
        server.trpc + "/keys.create",
        json={"name": "client-tests"},
        headers={"Authorization": f"Bearer {server.token(tenant)}"},
        timeout=30,
    )
    resp.raise_for_status()
    data = resp.json()["result"]["data"]
    return data["id"], data["secret"]


class Recorder:
    """httpx event hooks that keep each request's procedure and input."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, t.Any]] = []
        self.opened: list[httpx.Client] = []

    def _record(self, request: httpx.Request) -> None:
        procedure = request.url.path.rsplit("/", 1)[-1]
        if request.method == "GET":
            raw = request.url.params.get("input")
            payload = json.loads(raw) if raw else None
        else:
            payload = json.loads(request.content)
        self.calls.append((procedure, payload))

    def procedures(self) -> list[str]:
        return [p for p, _ in self.calls]

    def inputs(self, procedure: str) -> list[t.Any]:
        return [i for p, i in self.calls if p == procedure]

    def client(self) -> httpx.Client:
        """A client that records; the fixture closes it (Memsvc leaves one given to it open)."""
        self.opened.append(httpx.Client(event_hooks={"request": [self._record]}))
        return self.opened[-1]

    def async_client(self) -> httpx.AsyncClient:
        """A client that records; the test closes it (async with)."""

        async def record(request: httpx.Request) -> None:
            self._record(request)

        return httpx.AsyncClient(event_hooks={"request": [record]})


class DroppingProxy:
    """A TCP proxy in front of memsvc that loses answers: for the first ``drop``
    requests it lets the server answer, then closes the client's connection
    without passing the answer on. The request was applied; the client cannot
    know it.
    """

    def __init__(self, upstream: str, drop: int) -> None:
        parsed = httpx.URL(upstream)
        self.upstream = (parsed.host, parsed.port or 80)
        self.drop = drop
        self.requests = 0
        self.dropped = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(self.upstream) as up:
            from_client, from_server = conn.makefile("rb"), up.makefile("rb")
            while True:
                request = _http_message(from_client)
                if request is None:
                    return
                up.sendall(request)
                answer = _http_message(from_server)
                with self.lock:
                    self.requests += 1
                    lose = self.dropped < self.drop
                    self.dropped += lose
                if lose or answer is None:
                    conn.shutdown(socket.SHUT_RDWR)
                    return
                conn.sendall(answer)


def _http_message(stream: t.BinaryIO) -> bytes | None:
    """One HTTP/1.1 request or response with a Content-Length body (or none), or None at EOF."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = stream.readline()
        if not line:
            return None
        head += line
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + stream.read(length)


def refused_url() -> str:
    """A loopback URL where nothing listens: connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Bound, then closed without listening: the port is free and refuses.
    return f"http://127.0.0.1:{port}"


class Block(t.NamedTuple):
    """A fenced block of a Markdown document."""

    lang: str
    code: str
    #: False for a block right after a ``<!-- not run -->`` line.
    run: bool
    line: int


def blocks(text: str) -> list[Block]:
    """A Markdown document's fenced blocks, in order."""
    out = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```\n", text, re.S | re.M):
        before = text[: match.start()].rstrip().splitlines()
        skip = bool(before) and before[-1].strip() == "<!-- not run -->"
        line = text.count("\n", 0, match.start()) + 1
        out.append(Block(match.group(1), match.group(2), not skip, line))
    return out


# -- the documents' examples ---------------------------------------------------------

#: The server URL the documents' examples use; the tests put a real one in its place.
DOC_URL = "http://127.0.0.1:8000"
DOC = REPO / "docs" / "clients.md"
NUMBER = re.compile(r"-?\d+\.\d+")
MASKS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"), "<time>"),
]
#: Examples that import LlamaIndex run in its virtualenv, by tests/llamaindex.
LLAMAINDEX = "llama_index"


class Example(t.NamedTuple):
    """A runnable block of a document: where, its code, and the text block shown after it."""

    line: int
    code: str
    shown: str | None


def examples(lang: str, path: pathlib.Path = DOC, *, llamaindex: bool = False) -> list[Example]:
    """A document's runnable blocks in ``lang``, those importing LlamaIndex or the others."""
    doc = blocks(path.read_text())
    out = []
    for i, block in enumerate(doc):
        if block.lang != lang or not block.run:
            continue
        if re.match(r"# [\w.-]+\.py:", block.code):
            # A file of a generated client's quick start, run with its generated
            # package by tests/e2e/test_generated_clients.py.
            continue
        if (LLAMAINDEX in block.code) != llamaindex:
            continue
        following = doc[i + 1] if i + 1 < len(doc) else None
        shown = following.code if following is not None and following.lang == "text" else None
        out.append(Example(block.line, block.code, shown))
    return out


def same_output(got: str, want: str) -> bool:
    """Equal once ids and times are masked, numbers within 0.02 (int8 inference varies by CPU)."""
    for pattern, mask in MASKS:
        got, want = pattern.sub(mask, got), pattern.sub(mask, want)
    got_numbers, want_numbers = NUMBER.findall(got), NUMBER.findall(want)
    return (
        NUMBER.sub("<n>", got).strip() == NUMBER.sub("<n>", want).strip()
        and len(got_numbers) == len(want_numbers)
        and all(
            abs(float(g) - float(w)) < 0.02 for g, w in zip(got_numbers, want_numbers, strict=True)
        )
    )


def run_example(example: Example, server: Server, key: str, cwd: pathlib.Path, name: str) -> None:
    """Run a Python example as a reader would (this Python, a key in ``MEMSVC_API_KEY``)
    and check it prints what the document shows."""
    assert example.shown is not None, f"the example at line {example.line} shows no output"
    assert DOC_URL in example.code
    result = subprocess.run(
        [sys.executable, "-c", example.code.replace(DOC_URL, server.url)],
        cwd=cwd,
        env={**os.environ, "MEMSVC_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"line {example.line}:\n{result.stderr}"
    assert same_output(result.stdout, example.shown), (
        f"{name}, example at line {example.line}:\n got: {result.stdout}\nwant: {example.shown}"
    )

"""Real memsvc servers for the client's tests, started with the ``memsvc`` command.

Each server has a temporary SQLite database and limits folder of its own
and is driven only through the ``memsvc`` command line (``run``, ``keys``,
``token``), as an operator would, so these tests need nothing of the
server's own test suite: ``cd clients/python && pytest`` runs them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import os
import pathlib
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

#: The ``memsvc`` command of the environment running the tests.
MEMSVC = shutil.which("memsvc", path=str(pathlib.Path(sys.executable).parent)) or "memsvc"

#: Where every test server keeps the bundled model converted for ONNX
#: Runtime: converting takes a second or two, once per machine.
MODEL_CACHE = os.path.join(tempfile.gettempdir(), f"memsvc-test-models-{os.getuid()}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclasses.dataclass
class Server:
    """A ``memsvc run`` process and the settings (environment) it was started with."""

    url: str
    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    log: pathlib.Path

    @property
    def trpc(self) -> str:
        return self.url + "/trpc"

    def memsvc(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``memsvc ARGS`` on this server's database; fails the test if it fails."""
        done = subprocess.run(
            [MEMSVC, *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise AssertionError(f"memsvc {' '.join(args)} failed:\n{done.stderr}")
        return done

    def create_key(self, tenant: str = "acme", name: str = "client-tests") -> str:
        """A new API key's secret (``memsvc keys create``)."""
        return self.memsvc("keys", "create", tenant, name).stdout.strip()

    def create_key_with_id(self, tenant: str, name: str) -> tuple[str, str]:
        """A new API key's record id and secret (``memsvc keys create``)."""
        done = self.memsvc("keys", "create", tenant, name)
        found = re.search(r"\(id (\S+)\)", done.stderr)
        assert found, done.stderr
        return found.group(1), done.stdout.strip()

    def set_limits(self, key_id: str, *, per_minute: int, concurrent: int = 10) -> None:
        """Give a key its own limits (``memsvc keys set-limits``); they apply at once."""
        self.memsvc(
            "keys",
            "set-limits",
            key_id,
            "--per-minute",
            str(per_minute),
            "--concurrent",
            str(concurrent),
        )

    def token(self, tenant: str = "acme") -> str:
        """A token for the keys router (``memsvc token``)."""
        return self.memsvc("token", tenant).stdout.strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(tmp: pathlib.Path, *, deadline: float = 90, **settings: str) -> Server:
    """``memsvc run`` on a free loopback port, with a new database in ``tmp``.

    ``settings`` are environment variables (``MEMSVC_RATE_LIMIT_PER_MINUTE``,
    ``WEB_CONCURRENCY``...) on top of the test defaults: two workers, a token
    secret of its own, the shared converted-model cache.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSVC_")}
    env.update(
        {
            "MEMSVC_DATABASE": str(tmp / "memsvc.sqlite3"),
            "MEMSVC_BIND": f"127.0.0.1:{port}",
            "WEB_CONCURRENCY": "2",
            "MEMSVC_JWT_SECRET": secrets.token_urlsafe(32),
            "MEMSVC_LIMITS_DIR": str(tmp / "limits"),
            "MEMSVC_MODEL_CACHE_DIR": MODEL_CACHE,
            **settings,
        }
    )
    log = tmp / f"memsvc-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [MEMSVC, "run"], cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    server = Server(f"http://127.0.0.1:{port}", proc, env, log)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"memsvc run exited with {proc.returncode}:\n{server.output()}")
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    server.stop()
    raise AssertionError(f"memsvc did not answer /health within {deadline}s:\n{server.output()}")


class FakeProvider:
    """An OpenAI-compatible ``POST /v1/embeddings`` answering after ``delay`` seconds.

    For a server embedding through a provider (its ``settings``): a slow
    one makes memsvc answer 503, and its model is one memsvc has measured
    no threshold for. Vectors are 8-d, derived from each text's hash.
    """

    def __init__(self, delay: float = 1.0, dimensions: int = 8):
        self.delay = delay
        self.dimensions = dimensions
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(provider.delay)
                data = [
                    {"index": i, "embedding": provider.vector(text)}
                    for i, text in enumerate(body["input"])
                ]
                out = json.dumps({"data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def vector(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        return [b / 255 + 0.01 for b in digest[: self.dimensions]]

    @property
    def settings(self) -> dict[str, str]:
        """memsvc settings (environment) that make a server embed through this provider."""
        host, port = self.server.server_address[:2]
        return {
            "MEMSVC_EMBEDDER": "openai",
            "MEMSVC_EMBEDDING_URL": f"http://{host!s}:{port}/v1",
            "MEMSVC_EMBEDDING_MODEL": "fake",
            "MEMSVC_EMBEDDING_DIMENSIONS": str(self.dimensions),
        }

    def __enter__(self) -> FakeProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

"""A slow OpenAI-compatible embeddings endpoint that counts how many calls it is serving."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time

import numpy as np


class FakeProvider:
    """``POST /v1/embeddings`` answering after ``delay`` seconds with 8-d vectors.

    Records the most embedding calls it ever served at once, per marker: a
    text containing a marker word counts under that marker. A call whose
    marker has a gate in ``gates`` is held until that gate is set instead.
    """

    def __init__(
        self,
        delay: float = 1.0,
        dimensions: int = 8,
        gates: dict[str, threading.Event] | None = None,
    ):
        self.delay = delay
        self.gates = gates or {}
        self.dimensions = dimensions
        self.lock = threading.Lock()
        self.current: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = body["input"]
                marker = texts[0].split()[0]
                with provider.lock:
                    provider.current[marker] = provider.current.get(marker, 0) + 1
                    provider.peak[marker] = max(
                        provider.peak.get(marker, 0), provider.current[marker]
                    )
                try:
                    gate = provider.gates.get(marker)
                    if gate is None:
                        time.sleep(provider.delay)
                    else:
                        gate.wait(120)
                finally:
                    with provider.lock:
                        provider.current[marker] -= 1
                data = [
                    {"index": i, "embedding": provider.vector(text)} for i, text in enumerate(texts)
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
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def settings(self) -> dict[str, str]:
        """memsvc settings (environment) that make a server embed through this provider."""
        return {
            "MEMSVC_EMBEDDER": "openai",
            "MEMSVC_EMBEDDING_URL": self.url,
            "MEMSVC_EMBEDDING_MODEL": "fake",
            "MEMSVC_EMBEDDING_DIMENSIONS": str(self.dimensions),
        }

    def __enter__(self) -> FakeProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class UnitProvider(FakeProvider):
    """Unit vectors of any size, a fixed one per text (seeded by its hash), answered at once."""

    def __init__(self, dimensions: int, delay: float = 0.0):
        super().__init__(delay=delay, dimensions=dimensions)

    def vector(self, text: str) -> list[float]:
        return unit_vector(text, self.dimensions).tolist()


def unit_vector(text: str, dimensions: int) -> np.ndarray:
    """:class:`UnitProvider`'s vector for ``text``, as it stores it (float32)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dimensions)
    return (v / np.linalg.norm(v)).astype(np.float32)

"""Shared test helpers: the one error-shape assertion, test embedders, ids."""

from __future__ import annotations

import hashlib
import json
import pathlib
import typing as t
import uuid

import numpy as np

from memsvc.embeddings import Embedder
from memsvc.embeddings import unit_rows


def assert_error(resp: t.Any, status: int, code: str, path: str | None) -> dict:
    """Assert the spec's error envelope, exactly, and return its ``error``."""
    body = resp.get_json() if hasattr(resp, "get_json") else resp.json()
    assert resp.status_code == status, (resp.status_code, body)
    assert resp.headers["Content-Type"] == "application/json"
    assert_error_item(body, status, code, path)
    return body["error"]


def assert_error_item(body: dict, status: int, code: str, path: str | None) -> None:
    """One error envelope (alone, or an item of a batch answer)."""
    assert list(body) == ["error"], body
    error = body["error"]
    assert list(error) == ["message", "code", "data"], error
    assert isinstance(error["message"], str) and error["message"]
    assert error["code"] == code
    expected = {"code": code, "httpStatus": status}
    if path is not None:
        expected["path"] = path
    assert error["data"] == expected
    assert "stack" not in json.dumps(body)


def query(client: t.Any, path: str, input: t.Any = None, **kwargs: t.Any) -> t.Any:
    """GET a tRPC query the way @trpc/client's httpLink does."""
    params = {} if input is None else {"input": json.dumps(input)}
    return client.get(f"/trpc/{path}", query_string=params, **kwargs)


def mutate(client: t.Any, path: str, input: t.Any, **kwargs: t.Any) -> t.Any:
    return client.post(f"/trpc/{path}", json=input, **kwargs)


def data(resp: t.Any) -> t.Any:
    """The result of a successful single call."""
    body = resp.get_json()
    assert resp.status_code == 200, body
    assert list(body) == ["result"] and list(body["result"]) == ["data"], body
    return body["result"]["data"]


def random_user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


class TableEmbedder(Embedder):
    """Embeds by table lookup, so a test decides every similarity exactly."""

    def __init__(self, vectors: dict[str, t.Sequence[float]], dimensions: int):
        self.dimensions = dimensions
        self.model_id = f"test:table-{dimensions}"
        self.vectors = vectors
        self.calls: list[list[str]] = []

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return unit_rows([self.vectors[text] for text in texts], len(texts), self.dimensions)

    def warm_up(self) -> None:
        pass


class HashEmbedder(Embedder):
    """Embeds any text to a pseudo-random vector seeded by the text."""

    def __init__(self, dimensions: int = 16, model_id: str | None = None):
        self.dimensions = dimensions
        self.model_id = model_id or f"test:hash-{dimensions}"

    def vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dimensions)

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        return unit_rows([self.vector(text) for text in texts], len(texts), self.dimensions)

    def warm_up(self) -> None:
        pass


def on_disk(db_path: str) -> bytes:
    """The bytes of a SQLite database file and its write-ahead log."""
    out = b""
    for suffix in ("", "-wal"):
        path = pathlib.Path(db_path + suffix)
        if path.exists():
            out += path.read_bytes()
    return out


def maintenance_round(app: t.Any) -> None:
    """What each worker's maintenance round does (after an erasure: a checkpoint)."""
    from memsvc.api.context import runtime
    from memsvc.housekeeping import Maintenance

    with app.app_context():
        rt = runtime()
        Maintenance(rt.backend, rt.search_cache, 60, rt.settings["JOB_RETENTION_DAYS"]).once()


class CountingEmbedder(Embedder):
    """A real embedder, counting the texts it is asked to embed (windows included)."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder
        self.model_id = embedder.model_id
        self.dimensions = embedder.dimensions
        self.batch_invariant = embedder.batch_invariant
        self.texts = 0

    @property
    def max_tokens(self) -> int | None:
        return self.embedder.max_tokens

    def windows(self, text: str) -> list[str]:
        return self.embedder.windows(text)

    def prepare(self) -> None:
        self.embedder.prepare()

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        return self.embedder.embed(texts)

    def warm_up(self) -> None:
        self.embedder.warm_up()

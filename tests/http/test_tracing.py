"""OpenTelemetry spans of a request, when MEMSVC_TRACING turns them on; nothing when off."""

from __future__ import annotations

import sys

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memsvc.embeddings.cache import CachedEmbedder
from memsvc.errors import ConfigError
from memsvc.observability import tracing
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.start("console", exporter=exporter)
    yield exporter
    tracing.stop()


def test_a_search_is_traced_from_request_to_store(make_app, new_key, spans):
    app = make_app(TRACING="console")
    # The tests' app embeds with the session's model, put in after the app
    # was made (and instrumented): wrap a view of it, as the app does its own.
    runtime = app.extensions["memsvc"]
    runtime.embedder = tracing.instrument_embedder(CachedEmbedder(runtime.embedder, 0), "local")
    client = app.test_client()
    auth = {"x-api-key": new_key()}
    data(mutate(client, "memory.add", {"userId": "u-secret", "content": "tea with Zbigniew"},
                headers=auth))  # fmt: skip
    spans.clear()
    headers = {**auth, "traceparent": f"00-{TRACE}-b7ad6b7169203331-01", "X-Request-Id": "r-1"}
    data(query(client, "memory.search", {"userId": "u-secret", "query": "tea"}, headers=headers))
    done = spans.get_finished_spans()
    names = [s.name for s in done]
    for name in ("http.request", "trpc.call", "limits", "embedding",
                 "search", "store.read"):  # fmt: skip
        assert name in names, names
    request = next(s for s in done if s.name == "http.request")
    # Part of the caller's trace; every other span under the request's.
    assert f"{request.context.trace_id:032x}" == TRACE
    assert all(s.context.trace_id == request.context.trace_id for s in done)
    assert request.attributes["request.id"] == "r-1"
    assert request.attributes["url.path"] == "/trpc/memory.search"
    call = next(s for s in done if s.name == "trpc.call")
    assert call.parent.span_id == request.context.span_id
    assert call.attributes["rpc.method"] == "memory.search"
    assert call.attributes["rpc.trpc.code"] == "OK"
    assert call.end_time - call.start_time > 0
    search = next(s for s in done if s.name == "search")
    store = next(s for s in done if s.name == "store.read")
    assert store.parent.span_id == search.context.span_id
    text = repr([(s.name, dict(s.attributes or {})) for s in done])
    for private in ("u-secret", "Zbigniew", "tea", auth["x-api-key"]):
        assert private not in text


def test_off_nothing_is_wrapped_and_opentelemetry_is_not_needed(make_app, new_key):
    assert not tracing.enabled()
    app = make_app()
    runtime = app.extensions["memsvc"]
    assert "acquire" not in vars(runtime.limiter) and "store" not in vars(runtime)
    assert tracing.span("search") is tracing.span("store.read")  # one no-op
    auth = {"x-api-key": new_key()}
    data(query(app.test_client(), "memory.getAll", {"userId": "u"}, headers=auth))


def test_without_the_extra_tracing_is_refused_at_start(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(ConfigError, match=r"pip install 'memsvc\[tracing\]'"):
        tracing.start("otlp")
    assert not tracing.enabled()

"""Optional OpenTelemetry spans: a request, its tRPC calls, limits, embedding, search, store.

Off unless ``MEMSVC_TRACING`` is ``otlp`` (spans sent over OTLP/HTTP to
``OTEL_EXPORTER_OTLP_ENDPOINT``, by default ``http://localhost:4318``) or
``console`` (printed), and the extra is installed: ``pip install
'memsvc[tracing]'``. Off, nothing here imports OpenTelemetry, :func:`span`
is one shared no-op, and no method is wrapped.

A request's span (``http.request``) is the parent of the rest, which
nest as they run: ``limits`` (acquiring a slot), ``embedding`` (the model
or provider), ``search``, and ``store.read`` / ``store.write`` (a
transaction). Each tRPC call gets a ``trpc.call`` span, made when it is
answered, with its procedure and code. An incoming W3C ``traceparent`` header makes the
request's span part of the caller's trace. Attributes never hold user
ids, text or secrets.
"""

from __future__ import annotations

import contextlib
import functools
import time
import typing as t

from ..errors import ConfigError

KINDS = ("off", "otlp", "console")

_NULL = contextlib.nullcontext()
_tracer: t.Any = None
_provider: t.Any = None


def enabled() -> bool:
    return _tracer is not None


def start(kind: str, exporter: t.Any = None) -> None:
    """Turn tracing on in this process (``kind``: otlp or console), once."""
    global _tracer, _provider
    if kind == "off" or _tracer is not None:
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    except ImportError:
        raise ConfigError(
            f"MEMSVC_TRACING={kind} needs OpenTelemetry: pip install 'memsvc[tracing]'"
        ) from None
    from .._version import __version__

    provider = TracerProvider(
        resource=Resource.create({"service.name": "memsvc", "service.version": __version__})
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif kind == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "MEMSVC_TRACING=otlp needs the OTLP exporter: pip install 'memsvc[tracing]'"
            ) from None
        # Its thread starts again in each worker after gunicorn's fork.
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _provider = provider
    _tracer = provider.get_tracer("memsvc")


def stop() -> None:
    """Flush and turn tracing off (tests; a process that ends)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def span(name: str, **attributes: t.Any) -> t.ContextManager[t.Any]:
    """A span for the block, a child of the running one; the shared no-op when off."""
    tracer = _tracer
    if tracer is None:
        return _NULL
    return tracer.start_as_current_span(name, attributes=attributes or None)


def request_span(environ: t.Mapping[str, t.Any], request_id: str) -> t.ContextManager[t.Any]:
    """The span of one HTTP request, joined to the caller's trace by ``traceparent``."""
    tracer = _tracer
    if tracer is None:
        return _NULL
    from opentelemetry.propagate import extract

    carrier = {"traceparent": environ.get("HTTP_TRACEPARENT", "")}
    if environ.get("HTTP_TRACESTATE"):
        carrier["tracestate"] = environ["HTTP_TRACESTATE"]
    return tracer.start_as_current_span(
        "http.request",
        context=extract(carrier) if carrier["traceparent"] else None,
        attributes={
            "http.request.method": environ.get("REQUEST_METHOD", ""),
            # The path only: a query's input (user ids, text) is in the query string.
            "url.path": environ.get("PATH_INFO", ""),
            "request.id": request_id,
        },
    )


def call_span(procedure: str, code: str, started: float) -> None:
    """A tRPC call's span, made once it is answered (``started``: its perf_counter())."""
    tracer = _tracer
    if tracer is None:
        return
    now = time.time_ns()
    begun = now - int((time.perf_counter() - started) * 1e9)
    s = tracer.start_span(
        "trpc.call",
        start_time=begun,
        attributes={"rpc.system": "trpc", "rpc.method": procedure, "rpc.trpc.code": code},
    )
    s.end(end_time=now)


F = t.TypeVar("F", bound=t.Callable[..., t.Any])


def traced(name: str, fn: F, **attributes: t.Any) -> F:
    """``fn`` running inside a span ``name`` (``fn`` itself when tracing is off)."""
    if _tracer is None:
        return fn

    @functools.wraps(fn)
    def run(*args: t.Any, **kwargs: t.Any) -> t.Any:
        with span(name, **attributes):
            return fn(*args, **kwargs)

    return t.cast(F, run)


def _traced_block(
    name: str, block: t.Callable[..., t.ContextManager[t.Any]]
) -> t.Callable[..., t.ContextManager[t.Any]]:
    """``block`` (a context manager's factory) whose whole ``with`` runs inside a span."""

    @contextlib.contextmanager
    def run(*args: t.Any, **kwargs: t.Any) -> t.Iterator[t.Any]:
        with span(name), block(*args, **kwargs) as value:
            yield value

    return run


E = t.TypeVar("E")


def instrument_embedder(embedder: E, provider: str) -> E:
    """A span around each of ``embedder``'s calls (in place; nothing when off)."""
    if _tracer is not None:
        embed = embedder.embed  # type: ignore[attr-defined]
        embedder.embed = traced("embedding", embed, provider=provider)  # type: ignore[attr-defined]
    return embedder


def instrument(runtime: t.Any, provider: str) -> None:
    """Spans around the runtime's limiter, embedder and stores' transactions."""
    if _tracer is None:
        return
    limiter = runtime.limiter
    limiter.acquire = traced("limits", limiter.acquire)
    limiter.charge = traced("limits", limiter.charge)
    instrument_embedder(runtime.embedder, provider)
    make_store = runtime.store

    def store() -> t.Any:
        s = make_store()
        s.read = _traced_block("store.read", s.read)
        s.write = _traced_block("store.write", s.write)
        return s

    runtime.store = store

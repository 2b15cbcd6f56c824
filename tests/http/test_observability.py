"""Request ids, the access line, audit lines and /metrics, through the app."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from memsvc.cli import cli
from memsvc.limits import Limiter
from memsvc.limits import Limits
from memsvc.limits import Refused
from memsvc.observability import logs
from memsvc.observability import metrics
from memsvc.tokens import LocalVerifier
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

SECRET = "k" * 40
TOKEN = "scrape-token-0123456789abcdef"


class Collect(logging.Handler):
    """The ``memsvc`` lines, through memsvc's own request-id filter and formatters."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.addFilter(logs.RequestIdFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def named(self, name: str) -> list[logging.LogRecord]:
        return [r for r in self.records if r.name == name]


@pytest.fixture
def lines():
    handler = Collect()
    logger = logging.getLogger("memsvc")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def test_an_incoming_request_id_is_kept_and_a_bad_one_replaced(client, auth):
    ok = query(client, "memory.getAll", {"userId": "u"}, headers={**auth, "X-Request-Id": "abc-1"})
    assert ok.headers["X-Request-Id"] == "abc-1"
    for bad in ("x" * 129, "has space", 'quo"te', "ünï", ""):
        resp = query(
            client, "memory.getAll", {"userId": "u"}, headers={**auth, "X-Request-Id": bad}
        )
        made = resp.headers["X-Request-Id"]
        assert made != bad and len(made) == 32 and int(made, 16) >= 0
    # Every response: errors, batches, /health, unknown URLs.
    answers = [
        query(client, "memory.getAll", {"userId": "u"}),
        client.get("/trpc/memory.getAll,memory.getAll?batch=1&input={}", headers=auth),
        client.get("/health"),
        client.get("/nowhere"),
        client.put("/trpc/memory.add"),
    ]
    ids = [resp.headers["X-Request-Id"] for resp in answers]
    assert len(set(ids)) == len(ids)


def test_the_access_line_says_what_happened_and_nothing_private(client, auth, key, lines):
    user, text = "user-secret-42", "my neighbour's name is Zbigniew"
    mutate(client, "memory.add", {"userId": user, "content": text}, headers=auth)
    query(client, "memory.search", {"userId": user, "query": text}, headers=auth)
    query(client, "memory.getById", {"id": "00000000-0000-4000-8000-000000000000"}, headers=auth)
    client.get(
        "/trpc/memory.getAll,memory.nothing?batch=1&input={}",
        headers={**auth, "X-Request-Id": "batch-7"},
    )
    access = [r.getMessage() for r in lines.named("memsvc.observability.access_log")]
    assert len(access) == 4
    add, search, missing, batch = access
    assert '"POST /trpc/memory.add HTTP/1.1" 200 ' in add
    assert "procedures=memory.add error=- key=" in add and "tenant=tenant-A" in add
    assert "ms procedures=" in add
    assert "procedures=memory.getById error=NOT_FOUND" in missing and " 404 " in missing
    assert "procedures=memory.getAll,memory.nothing error=BAD_REQUEST,NOT_FOUND" in batch
    assert " 207 " in batch
    fields = lines.named("memsvc.observability.access_log")[3].memsvc
    assert fields["request_id"] == "batch-7" and lines.named("memsvc.observability.access_log")[
        3
    ].request_id == ("batch-7")
    assert fields["key_id"] != "-" and fields["tenant"] == "tenant-A"
    everything = "\n".join(access) + json.dumps(
        [r.memsvc for r in lines.named("memsvc.observability.access_log")]
    )
    for private in (user, "Zbigniew", key, key[-24:], "input="):
        assert private not in everything
    # As JSON, for log shippers: one object a line, the same fields.
    obj = json.loads(logs.JsonFormatter().format(lines.named("memsvc.observability.access_log")[3]))
    assert obj["request_id"] == "batch-7" and obj["status"] == 207
    assert obj["procedures"] == "memory.getAll,memory.nothing"
    assert obj["logger"] == "memsvc.observability.access_log" and obj["duration_ms"] >= 0


def test_log_lines_written_during_a_request_name_it(app, lines):
    log = logging.getLogger("memsvc.test")

    @app.route("/say")
    def say():
        log.warning("something worth saying")
        return "ok"

    app.test_client().get("/say", headers={"X-Request-Id": "req-99"})
    said = next(r for r in lines.records if r.name == "memsvc.test")
    assert said.request_id == "req-99"
    assert logs.TextFormatter().format(said).endswith("something worth saying request_id=req-99")
    log.warning("outside any request")
    assert lines.records[-1].request_id is None


def test_key_operations_and_erasures_leave_audit_lines(make_app, key, lines, tmp_path):
    trail = tmp_path / "audit.jsonl"
    app = make_app(JWT_SECRET=SECRET, AUDIT_LOG=str(trail))
    client = app.test_client()
    bearer = {"Authorization": f"Bearer {LocalVerifier(SECRET).mint('tenant-A')}"}
    created = data(mutate(client, "keys.create", {"name": "laptop"}, headers=bearer))
    data(mutate(client, "keys.revoke", {"id": created["id"]}, headers=bearer))
    api = {"x-api-key": key}
    mutate(client, "memory.add", {"userId": "u-private", "content": "x"}, headers=api)
    data(mutate(client, "memory.deleteAll", {"userId": "u-private"}, headers=api))
    audit = [r.memsvc for r in lines.named("memsvc.observability.audit")]
    assert [a["audit"] for a in audit] == ["keys.create", "keys.revoke", "memory.deleteAll"]
    assert audit[0]["who"] == "token" and audit[0]["tenant"] == "tenant-A"
    assert audit[0]["key_id"] == created["id"] and audit[1]["key_id"] == created["id"]
    assert audit[2]["who"].startswith("key:") and audit[2]["deleted"] == 1
    written = [json.loads(line) for line in trail.read_text().splitlines()]
    assert written == audit
    text = trail.read_text() + "".join(
        r.getMessage() for r in lines.named("memsvc.observability.audit")
    )
    assert created["secret"] not in text and "u-private" not in text


def test_administrative_commands_leave_audit_lines(cli_context, tmp_path, lines):
    trail = tmp_path / "audit.jsonl"
    context = dataclasses.replace(
        cli_context, overrides={**cli_context.overrides, "AUDIT_LOG": str(trail)}
    )

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args), obj=dataclasses.replace(context))
        assert result.exit_code == 0, result.output
        return result.stdout

    secret = run("keys", "create", "tenant-C", "ops").strip()
    key_id = next(
        line.split()[0] for line in run("keys", "list").splitlines() if "tenant-C" in line
    )
    run("keys", "set-limits", key_id, "--per-minute", "5")
    run("keys", "revoke", key_id)
    export = tmp_path / "out.jsonl"
    run("export", str(export), "--tenant", "tenant-C")
    run("import", str(export))
    written = [json.loads(line) for line in trail.read_text().splitlines()]
    assert [w["audit"] for w in written] == [
        "keys.create", "keys.set-limits", "keys.revoke", "import",
    ]  # fmt: skip
    assert all(w["who"].startswith("os-") and w["tenant"] == "tenant-C" for w in written)
    assert written[1]["per_minute"] == 5 and written[0]["key_id"] == key_id
    assert secret not in trail.read_text()
    assert [r.memsvc for r in lines.named("memsvc.observability.audit")] == written


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_are_off_unless_configured(client, auth):
    resp = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert_error(resp, 404, "NOT_FOUND", None)


def test_metrics_ask_for_the_token_and_count_calls(make_app, new_key):
    app = make_app(METRICS_TOKEN=TOKEN)
    client = app.test_client()
    assert_error(client.get("/metrics"), 401, "UNAUTHORIZED", None)
    wrong = client.get("/metrics", headers={"Authorization": "Bearer " + "x" * len(TOKEN)})
    assert_error(wrong, 401, "UNAUTHORIZED", None)
    scrape = {"Authorization": f"Bearer {TOKEN}"}
    before = samples(client.get("/metrics", headers=scrape).text)
    auth = {"x-api-key": new_key()}
    for _ in range(3):
        query(client, "memory.getAll", {"userId": "u"}, headers=auth)
    for name in ("memory.x1", "memory.x2", "keys.whatever"):
        query(client, name, {}, headers=auth)  # unknown procedures share one label value
    after = samples(client.get("/metrics", headers=scrape).text)

    def delta(name: str, **labels: str) -> float:
        k = (name, tuple(sorted(labels.items())))
        return after.get(k, 0.0) - before.get(k, 0.0)

    assert delta("memsvc_calls_total", procedure="memory.getAll", code="OK") == 3
    assert delta("memsvc_calls_total", procedure="unknown", code="NOT_FOUND") == 3
    assert delta("memsvc_call_duration_seconds_count", procedure="memory.getAll") == 3
    procedures = {dict(labels).get("procedure") for _, labels in after} - {None}
    assert procedures <= set(app.extensions["trpc"]) | {"unknown"}


def test_refusals_are_counted_by_the_limit_that_refused(make_app, new_key, tmp_path):
    app = make_app(METRICS_TOKEN=TOKEN, RATE_LIMIT_PER_MINUTE=2)
    client = app.test_client()
    scrape = {"Authorization": f"Bearer {TOKEN}"}
    before = samples(client.get("/metrics", headers=scrape).text)
    auth = {"x-api-key": new_key()}
    codes = [
        query(client, "memory.getAll", {"userId": "u"}, headers=auth).status_code for _ in range(3)
    ]
    assert codes == [200, 200, 429]
    after = samples(client.get("/metrics", headers=scrape).text)
    reasons = {
        dict(labels)["reason"]: value - before.get((name, labels), 0.0)
        for (name, labels), value in after.items()
        if name == "memsvc_limiter_refusals_total"
    }
    assert reasons == {"rate": 1, "concurrency": 0, "cost": 0, "tenant_keys": 0}
    # The limiter itself says which of its limits refused.
    limiter = Limiter(str(tmp_path / "limits"))
    limiter.acquire("k", Limits(per_minute=0, concurrent=1))
    with pytest.raises(Refused) as refused:
        limiter.acquire("k", Limits(per_minute=0, concurrent=1))
    assert refused.value.reason == "concurrency"


def test_unknown_paths_stay_one_line_and_one_label(make_app, new_key, lines):
    app = make_app(METRICS_TOKEN=TOKEN)
    client = app.test_client()
    auth = {"x-api-key": new_key()}
    for i in range(50):
        client.get(f"/trpc/memory.fake{i}%0AINFO forged line", headers=auth)
    access = [r.getMessage() for r in lines.named("memsvc.observability.access_log")]
    assert len(access) == 50 and all("\n" not in line for line in access)
    assert "memory.fake7\\nINFO forged line" in access[7]
    counting = metrics._metrics
    assert counting is not None
    assert not [key for key in counting._bound if key[0].startswith("memory.fake")]


def test_the_sampled_gauges_count_the_database(make_app, new_key, store_kind):
    app = make_app(METRICS_TOKEN=TOKEN)
    client = app.test_client()
    auth = {"x-api-key": new_key()}
    new_key(name="second")
    for user in ("u1", "u1", "u2"):
        data(mutate(client, "memory.add", {"userId": user, "content": f"fact of {user}"},
                    headers=auth))  # fmt: skip
    data(query(client, "memory.search", {"userId": "u1", "query": "fact"}, headers=auth))
    runtime = app.extensions["memsvc"]
    metrics.sample(runtime.backend, runtime.search_cache)
    got = samples(client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text)
    assert got[("memsvc_memories", ())] == 3
    assert got[("memsvc_end_users", ())] == 2
    assert got[("memsvc_api_keys", ())] == 2
    assert got[("memsvc_search_cache_users", ())] == 1
    assert got[("memsvc_search_cache_bytes", ())] > 0
    if store_kind == "postgres":
        assert got[("memsvc_postgres_pool_connections", ())] >= 1


def test_the_access_line_written_straight_is_the_line_logging_writes(client, auth, monkeypatch):
    """memsvc writes its access line without a log record when its handler is the only
    one; any other handler, filter or format gets the record, as logging makes it."""
    import io
    import re

    written = []
    write_info = logs.write_info
    monkeypatch.setattr(
        logs, "write_info", lambda *args: written.append(write_info(*args)) or written[-1]
    )
    # pytest's own capture hangs on the root logger: not while this test runs.
    monkeypatch.setattr(logging.root, "handlers", [])
    handler = logs.configure("text")
    stream = io.StringIO()
    old = handler.setStream(stream)
    logger = logging.getLogger("memsvc.observability.access_log")
    try:
        headers = {**auth, "X-Request-Id": "same-1"}
        query(client, "memory.getAll", {"userId": "u"}, headers=headers)
        straight = stream.getvalue()
        logger.addFilter(lambda record: True)  # logging's own way from here
        stream.seek(0)
        stream.truncate()
        query(client, "memory.getAll", {"userId": "u"}, headers=headers)
        logged = stream.getvalue()
    finally:
        logger.filters.clear()
        handler.setStream(old)

    def shape(text: str) -> list[str]:
        lines = [line for line in text.splitlines() if "in access_log:" in line]
        # The clock and the duration differ from one request to the next.
        return [re.sub(r"^\[[-\d :,]+\]| [\d.]+ms ", "#", line) for line in lines]

    assert written == [True, False]
    assert len(shape(straight)) == 1 and shape(straight) == shape(logged)
    assert re.fullmatch(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] INFO in access_log: .*", straight.strip()
    )
    assert straight.strip().endswith("request_id=same-1")

"""The console's jobs page and a fact's page: jobs of the signed-in tenant only, a failed one
retried by a console form only, a model's error text shown as text, a fact's sources and its
supersession chain.

Jobs run against a real chat-completions server on this machine (tests/support/fake_llm.py),
whose default brain makes "The user said: ..." of each user message and supersedes a fact
with the same first five words; they are run by the app's own extraction, in the test's thread.
"""

from __future__ import annotations

import html
import re
import typing as t

import pytest

from memsvc.api.console import jobs_page
from memsvc.api.context import runtime
from memsvc.api.context import store
from memsvc.services import keys
from tests.http.test_console_http import csrf_of
from tests.http.test_console_http import sign_in
from tests.support import fake_llm
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

HOSTILE = '<script>alert("owned")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def llm():
    with fake_llm.FakeModel() as model:
        yield model


@pytest.fixture
def service(configured, llm):
    """The API client of tenant-A (key in ``auth``), and one that runs the due jobs."""

    def make(**settings: t.Any):
        client, auth = configured(
            LLM_URL=llm.url, LLM_MODEL="m", EXTRACT_BACKOFF_SECONDS=0.001, **settings
        )

        def run_jobs() -> int:
            with client.application.app_context():
                return runtime().extraction.run_due()

        return client, auth, run_jobs

    return make


def ingest(client, auth, user: str, session: str, *texts: str) -> dict[str, t.Any]:
    body = {
        "userId": user,
        "sessionId": session,
        "messages": [{"role": "user", "content": text} for text in texts],
        "extract": True,
    }
    return data(mutate(client, "memory.ingest", body, headers=auth))


def job(client, auth, job_id: str) -> dict[str, t.Any]:
    return data(query(client, "memory.job", {"id": job_id}, headers=auth))


def facts(client, auth, user: str) -> list[dict[str, t.Any]]:
    body = {"userId": user, "kinds": ["fact"], "includeSuperseded": True}
    return data(query(client, "memory.getAll", body, headers=auth))


def rows(page) -> list[str]:
    """The jobs' table rows of a jobs page, each as its HTML."""
    return re.findall(r'<tr class="job .*?</tr>', page.text, re.S)


def test_the_jobs_page_lists_this_tenants_jobs_only_newest_first(service):
    client, auth, run_jobs = service()
    with client.application.app_context():
        other = {"x-api-key": keys.create(store(), "tenant-B", "b", "memsvc").secret}
    older = ingest(client, auth, "ann", "chat-1", "I live in Berlin")
    newer = ingest(client, auth, "ann", "chat-2", "?nothing to draw from this")
    theirs = ingest(client, other, "bob-of-b", "their-chat", "I live in Oslo")
    assert run_jobs() == 3

    assert sign_in(client, auth["x-api-key"]).status_code == 302
    page = client.get("/console/jobs")
    assert page.status_code == 200
    shown = rows(page)
    assert [re.search(r'id="job-([^"]+)"', r).group(1) for r in shown] == [
        newer["job"]["id"],
        older["job"]["id"],
    ]
    assert theirs["job"]["id"] not in page.text and "bob-of-b" not in page.text
    assert "their-chat" not in page.text
    done = job(client, auth, older["job"]["id"])
    [fact] = done["facts"]["added"]
    row = shown[1]
    assert ">done<" in row and "/console/session?user=ann&amp;id=chat-1" in row
    assert f"/console/memory?id={fact}" in row and ">+1<" in row
    assert f"{done['usage']['promptTokens']} in" in row
    # No retry for a job that did not fail.
    assert "Retry" not in page.text
    # The navigation leads here.
    assert 'href="/console/jobs" aria-current="page">Jobs<' in page.text

    by_user = client.get("/console/jobs", query_string={"user": "bob-of-b"})
    assert rows(by_user) == [] and "No jobs" in by_user.text
    failed = client.get("/console/jobs", query_string={"status": "failed"})
    assert rows(failed) == []
    bad = client.get("/console/jobs", query_string={"status": "lost"})
    assert bad.status_code == 400 and "queued, running, done, failed" in bad.text


def test_jobs_are_paged_by_cursor(service, monkeypatch):
    monkeypatch.setattr(jobs_page, "JOBS_PAGE", 2)
    client, auth, _ = service()
    made = [ingest(client, auth, "ann", f"chat-{i}", f"I said {i}")["job"]["id"] for i in range(5)]
    sign_in(client, auth["x-api-key"])
    seen: list[str] = []
    url: str | None = "/console/jobs?user=ann"
    pages = 0
    while url is not None:
        page = client.get(url)
        seen += [re.search(r'id="job-([^"]+)"', r).group(1) for r in rows(page)]
        found = re.search(r'<a rel="next" href="([^"]+)"', page.text)
        url = html.unescape(found.group(1)) if found else None
        pages += 1
        assert url is None or "user=ann" in url
    assert pages == 3 and seen == made[::-1]


def test_a_failed_job_is_retried_from_the_console_only(service, llm):
    client, auth, run_jobs = service(EXTRACT_MAX_ATTEMPTS=1)
    llm.script(fake_llm.status(500, HOSTILE))
    out = ingest(client, auth, "ann", "chat-1", "I live in Berlin")
    run_jobs()
    failed = job(client, auth, out["job"]["id"])
    assert failed["status"] == "failed" and HOSTILE in failed["error"], failed

    sign_in(client, auth["x-api-key"])
    page = client.get("/console/jobs")
    # The endpoint's words are shown as text, never as markup.
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    [row] = rows(page)
    assert "&lt;script&gt;alert(" in row and "&lt;img src=x onerror=alert(1)&gt;" in row
    assert "Retry" in row
    csrf = csrf_of(page)
    form = {"csrf": csrf, "id": out["job"]["id"], "status": "", "user": "", "after": ""}

    # Without the session's token, or from another site: refused, and the job stays failed.
    assert client.post("/console/jobs/retry", data={**form, "csrf": "x"}).status_code == 403
    no_token = {k: v for k, v in form.items() if k != "csrf"}
    assert client.post("/console/jobs/retry", data=no_token).status_code == 403
    cross = client.post(
        "/console/jobs/retry", data=form, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    assert job(client, auth, out["job"]["id"])["status"] == "failed"

    retried = client.post("/console/jobs/retry", data={**form, "status": "failed"})
    assert retried.status_code == 302
    assert retried.headers["Location"].startswith("/console/jobs?status=failed&retried=")
    queued = job(client, auth, out["job"]["id"])
    assert queued["status"] == "queued" and queued["attempts"] == 0
    assert "is queued again" in client.get(retried.headers["Location"]).text

    # The endpoint answers now: the job is done, its fact drawn.
    run_jobs()
    assert job(client, auth, out["job"]["id"])["status"] == "done"
    assert "Retry" not in client.get("/console/jobs").text


def test_another_tenants_job_is_not_retried(service, llm):
    client, auth, run_jobs = service(EXTRACT_MAX_ATTEMPTS=1)
    with client.application.app_context():
        other = {"x-api-key": keys.create(store(), "tenant-B", "b", "memsvc").secret}
    llm.script(fake_llm.status(500))
    theirs = ingest(client, other, "bob", "chat-1", "I live in Oslo")
    run_jobs()
    assert job(client, other, theirs["job"]["id"])["status"] == "failed"

    page = sign_in(client, auth["x-api-key"]) and client.get("/console/jobs")
    form = {"csrf": csrf_of(page), "id": theirs["job"]["id"]}
    refused = client.post("/console/jobs/retry", data=form)
    assert refused.status_code == 404 and "Job not found" in refused.text
    assert job(client, other, theirs["job"]["id"])["status"] == "failed"


def test_a_facts_page_shows_its_sources_and_its_supersession_chain(service):
    client, auth, run_jobs = service()
    first = ingest(client, auth, "ann", "chat-1", "How are you", "I live in Berlin")
    run_jobs()
    second = ingest(client, auth, "ann", "chat-1", "I live in Paris now")
    run_jobs()
    found = {f["content"]: f for f in facts(client, auth, "ann")}
    berlin = found["The user said: I live in Berlin"]
    paris = found["The user said: I live in Paris now"]
    assert berlin["supersededBy"] == paris["id"]

    sign_in(client, auth["x-api-key"])
    old = client.get("/console/memory", query_string={"id": berlin["id"]})
    assert old.status_code == 200
    sources = re.search(r'data-testid="sources">(.*?)</ol>', old.text, re.S).group(1)
    # Its message, linked to its place in its session.
    assert first["memories"][1]["position"] == 1
    assert "/console/session?user=ann&amp;id=chat-1&amp;at=1#m-1" in sources
    assert "I live in Berlin" in sources and "How are you" not in sources
    by = re.search(r'data-testid="superseded-by">(.*?)</dd>', old.text, re.S).group(1)
    assert f"/console/memory?id={paris['id']}" in by and "I live in Paris now" in by
    assert f'datetime="{berlin["validTo"]}"' in by
    assert "no earlier fact" in old.text
    # Its history ends with the supersession.
    versions = re.findall(r"<strong>Version (\d+)</strong> <span>(\w+)</span>", old.text)
    assert versions == [("2", "supersede"), ("1", "add")]

    new = client.get("/console/memory", query_string={"id": paris["id"]})
    replaced = re.search(r'data-testid="replaced">(.*?)</dd>', new.text, re.S).group(1)
    assert f"/console/memory?id={berlin['id']}" in replaced and "I live in Berlin" in replaced
    assert "it is current" in new.text
    position = second["memories"][0]["position"]
    assert f"at={position}#m-{position}" in new.text

    # A message's page has none of this.
    message = client.get("/console/memory", query_string={"id": first["memories"][1]["id"]})
    assert message.status_code == 200 and 'data-testid="lineage"' not in message.text


def test_a_facts_page_shows_no_other_tenants_facts(service):
    """What a fact's page reads beside the API's calls is read for its own tenant: another
    tenant's user of the same id, and their facts, stay out of it."""
    client, auth, run_jobs = service()
    with client.application.app_context():
        other = {"x-api-key": keys.create(store(), "tenant-B", "b", "memsvc").secret}
    theirs = ingest(client, other, "ann", "chat-1", "My secret is 42")
    ingest(client, auth, "ann", "chat-1", "I live in Berlin")
    run_jobs()
    [fact] = facts(client, auth, "ann")
    sign_in(client, auth["x-api-key"])
    page = client.get("/console/memory", query_string={"id": fact["id"]})
    assert "I live in Berlin" in page.text and "My secret is 42" not in page.text
    # Their fact's page is not found from this tenant's session.
    [their_fact] = facts(client, other, "ann")
    assert client.get("/console/memory", query_string={"id": their_fact["id"]}).status_code == 404
    assert theirs["memories"][0]["id"] not in page.text

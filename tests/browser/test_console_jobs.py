"""The console's Jobs page and a fact's page in a real browser, with a real extraction.

The server's workers run the jobs against the fake chat model
(tests/support/fake_llm.py), whose default answer turns each user message
into the fact "The user said: ..." and supersedes a listed fact that starts
with the same five words.
"""

from __future__ import annotations

from tests.browser.conftest import Api
from tests.browser.conftest import sign_in
from tests.support import fake_llm


def _ingest(api: Api, user: str, session: str, text: str) -> dict:
    messages = [{"role": "user", "content": text}]
    body = {"userId": user, "sessionId": session, "messages": messages, "extract": True}
    return api.call("memory.ingest", body)


def test_jobs_page_lists_jobs_and_retries_a_failed_one(page, server, model):
    key = server.create_key("jobs-tenant", "console")
    api = Api(server, key)
    first = api.settled(_ingest(api, "rui", "s1", "I live in Lisbon")["job"]["id"])
    second = api.settled(_ingest(api, "rui", "s2", "I live in Porto")["job"]["id"])
    assert (first["status"], second["status"]) == ("done", "done")
    model.script(fake_llm.status(401))  # a wrong key: failed at once, no retry
    failed = api.settled(_ingest(api, "rui", "s3", "I like green tea")["job"]["id"])
    assert failed["status"] == "failed"

    sign_in(page, server, key)
    page.goto(server.url + "/console/jobs")
    rows = page.get_by_test_id("job")
    assert rows.count() == 3
    newest = page.locator(f"#job-{failed['id']}")
    assert "failed" in newest.get_attribute("class")
    assert "401" in newest.locator(".error-text").inner_text()
    done = page.locator(f"#job-{second['id']}")
    assert done.get_by_test_id("added").inner_text() == "+1"
    assert done.get_by_test_id("superseded").inner_text() == "superseded 1"

    # Retry: the model answers again, and the job is queued, then done.
    with page.expect_navigation():
        newest.get_by_role("button", name=f"Retry job {failed['id']}").click()
    assert "queued again" in page.get_by_role("status").inner_text()
    assert api.settled(failed["id"])["status"] == "done"
    page.goto(server.url + "/console/jobs?status=failed")
    assert page.get_by_test_id("job").count() == 0

    # The superseded fact's page: where it came from and what replaced it.
    old_fact = second["facts"]["superseded"][0]
    page.goto(server.url + f"/console/memory?id={old_fact}")
    sources = page.get_by_test_id("sources")
    assert "I live in Lisbon" in sources.inner_text()
    assert sources.get_by_role("link", name="s1 #0").count() == 1  # into its conversation
    by = page.get_by_test_id("superseded-by")
    assert by.get_by_role("link", name="The user said: I live in Porto").count() == 1
    with page.expect_navigation():
        by.get_by_role("link").click()
    assert "I live in Lisbon" in page.get_by_test_id("replaced").inner_text()


def test_a_retry_from_another_site_is_refused(page, server):
    key = server.create_key("jobs-csrf", "console")
    sign_in(page, server, key)
    response = page.request.post(
        server.url + "/console/jobs/retry",
        form={"id": "00000000-0000-4000-8000-000000000000", "csrf": "forged"},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status == 403

"""Extraction jobs through the client (sync and async), against a server with a fake model.

The model is memsvc's fake chat-completions server (tests/support/fake_llm.py
of the repository) run as a process: it answers each user message with the
fact "The user said: <text>", and a message line ``FAKE: <answer>`` makes
its whole answer that text, so a test scripts a broken answer through the
conversation itself. Each answer takes 1.5 s, so a job is seen unsettled.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import typing as t
import uuid

import pytest
from memsvc_client import AsyncMemsvc
from memsvc_client import Job
from memsvc_client import JobTimeout
from memsvc_client import Memsvc
from memsvc_client import NotFound
from memsvc_server import Server
from memsvc_server import start_server

pytestmark = pytest.mark.e2e

REPO = pathlib.Path(__file__).resolve().parents[3]
MODEL_DELAY_MS = 1500


@pytest.fixture(scope="module")
def model_url() -> t.Iterator[str]:
    """The fake model's base URL, served by its own process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_llm", "--port", "0"]
        + ["--delay-ms", str(MODEL_DELAY_MS)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    try:
        assert url.startswith("http://127.0.0.1:"), f"the fake model printed {url!r}"
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory: pytest.TempPathFactory, model_url: str) -> t.Iterator[Server]:
    """A server drawing facts with the fake model; one model call a job, so a broken
    answer fails its job at once."""
    s = start_server(
        tmp_path_factory.mktemp("jobs"),
        MEMSVC_RATE_LIMIT_PER_MINUTE="0",
        MEMSVC_LLM_URL=model_url,
        MEMSVC_LLM_MODEL="fake",
        MEMSVC_EXTRACT_MAX_ATTEMPTS="1",
    )
    yield s
    s.stop()


@pytest.fixture
def client(llm_server: Server) -> t.Iterator[Memsvc]:
    with Memsvc(llm_server.url, api_key=llm_server.create_key("acme", "jobs")) as memsvc:
        yield memsvc


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text, "id": uuid.uuid4().hex}]


def test_an_extracting_ingest_queues_a_job_that_adds_the_fact(client: Memsvc, user: str) -> None:
    out = client.ingest(user, said("I live in Porto"), session_id="s1", extract=True)
    job = out.job
    assert isinstance(job, Job) and job.status == "queued" and not job.settled
    assert (job.user_id, job.session_id, job.attempts) == (user, "s1", 0)
    assert job.facts is None and job.usage is None
    done = client.wait_for_job(job.id, timeout=60, interval=0.2)
    assert done.status == "done" and done.settled and done.attempts == 1 and done.error is None
    assert done.facts is not None and len(done.facts.added) == 1
    assert done.facts.superseded == () and done.facts.unchanged == 0
    assert done.usage is not None and done.usage.prompt_tokens > 0
    (fact,) = client.get_all(user, kinds=["fact"])
    assert fact.id == done.facts.added[0] and fact.content == "The user said: I live in Porto"
    assert fact.sources == (out.memories[0].id,)
    assert client.job(job.id) == done
    assert Job.from_wire(done.to_dict()) == done


def test_a_later_fact_supersedes_the_earlier_one(client: Memsvc, user: str) -> None:
    first = client.ingest(user, said("I live in Porto now"), extract=True, wait=True)
    assert first.job is not None and first.job.status == "done" and first.job.facts is not None
    (old,) = first.job.facts.added
    second = client.ingest(user, said("I live in Lisbon now"), extract=True, wait=True)
    assert second.job is not None and second.job.facts is not None
    assert second.job.facts.superseded == (old,)
    assert client.get(old).superseded_by == second.job.facts.added[0]
    assert client.history(old)[-1]["event"] == "supersede"


def test_without_extract_there_is_no_job(client: Memsvc, user: str) -> None:
    out = client.ingest(user, said("Just chatting"), wait=True)
    assert out.job is None and client.jobs(user_id=user) == []


def test_waiting_past_the_timeout_raises_with_the_job_as_last_seen(
    client: Memsvc, user: str
) -> None:
    out = client.ingest(user, said("I play the cello"), extract=True)
    assert out.job is not None
    with pytest.raises(JobTimeout) as raised:
        client.wait_for_job(out.job.id, timeout=0.3, interval=0.1)
    err = raised.value
    assert isinstance(err, TimeoutError) and err.job.id == out.job.id
    assert err.job.status in ("queued", "running") and err.code == "JOB_TIMEOUT"
    assert out.job.id in str(err) and "0.3s" in str(err)
    # The job went on: waiting again gets it.
    assert client.wait_for_job(out.job.id, timeout=60).status == "done"
    with pytest.raises(ValueError, match="interval"):
        client.wait_for_job(out.job.id, interval=0)


def test_jobs_pages_newest_first_and_filters(client: Memsvc, user: str) -> None:
    ids = [
        t.cast(Job, client.ingest(user, said(f"Fact number {n}"), extract=True).job).id
        for n in range(3)
    ]
    for job_id in ids:
        client.wait_for_job(job_id, timeout=60)
    newest_first = ids[::-1]
    first = client.jobs(user_id=user, limit=2)
    assert [j.id for j in first] == newest_first[:2]
    rest = client.jobs(user_id=user, limit=2, cursor=first[-1].id)
    assert [j.id for j in rest] == newest_first[2:]
    assert [j.id for j in client.iter_jobs(user_id=user, page_size=2)] == newest_first
    assert [j.id for j in client.jobs(user_id=user, status="done")] == newest_first
    assert client.jobs(user_id=user, status="failed") == []


def test_a_failed_job_is_retried(client: Memsvc, user: str) -> None:
    out = client.ingest(user, said("FAKE: this is not JSON"), extract=True)
    assert out.job is not None
    failed = client.wait_for_job(out.job.id, timeout=60)
    assert failed.status == "failed" and failed.attempts == 1 and failed.error
    assert failed.facts is None and client.get_all(user, kinds=["fact"]) == []
    assert [j.id for j in client.jobs(user_id=user, status="failed")] == [failed.id]
    again = client.retry_job(failed.id)
    assert again.id == failed.id and again.status == "queued" and again.attempts == 0
    # The same messages get the same broken answer: failed once more, one new attempt.
    second = client.wait_for_job(failed.id, timeout=60)
    assert second.status == "failed" and second.attempts == 1
    # A job not failed is answered as it is.
    done = client.ingest(user, said("I like tea"), extract=True, wait=True).job
    assert done is not None and client.retry_job(done.id) == done


def test_an_unknown_job_is_not_found(client: Memsvc, llm_server: Server, user: str) -> None:
    with pytest.raises(NotFound) as raised:
        client.job(str(uuid.uuid4()))
    assert raised.value.http_status == 404 and raised.value.path == "memory.job"
    with pytest.raises(NotFound):
        client.retry_job(str(uuid.uuid4()))
    with pytest.raises(NotFound):
        client.wait_for_job(str(uuid.uuid4()))
    # Another tenant's job is as unknown as a missing one.
    job = client.ingest(user, said("I am a tenant's user"), extract=True).job
    assert job is not None
    with Memsvc(llm_server.url, api_key=llm_server.create_key("other", "jobs")) as other:
        with pytest.raises(NotFound):
            other.job(job.id)
        assert other.jobs() == []


def test_the_async_client_waits_for_jobs_too(llm_server: Server, user: str) -> None:
    key = llm_server.create_key("acme", "async-jobs")

    async def scenario() -> None:
        async with AsyncMemsvc(llm_server.url, api_key=key) as memsvc:
            out = await memsvc.ingest(user, said("I run marathons"), extract=True, wait=True)
            assert out.job is not None and out.job.status == "done"
            assert out.job.facts is not None
            assert [m.id for m in await memsvc.get_all(user, kinds=["fact"])] == list(
                out.job.facts.added
            )
            assert [j.id async for j in memsvc.iter_jobs(user_id=user)] == [out.job.id]
            assert await memsvc.retry_job(out.job.id) == out.job
            with pytest.raises(NotFound):
                await memsvc.job(str(uuid.uuid4()))
            queued = await memsvc.ingest(user, said("I swim too"), extract=True)
            assert queued.job is not None
            with pytest.raises(JobTimeout):
                await memsvc.wait_for_job(queued.job.id, timeout=0.2, interval=0.05)
            assert (await memsvc.wait_for_job(queued.job.id, timeout=60)).status == "done"

    asyncio.run(scenario())

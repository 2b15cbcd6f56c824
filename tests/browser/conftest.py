"""The console in a real browser: Debian's Chromium driven by Playwright, against gunicorn.

Chromium comes from ``make browser`` (the Debian package, installed by the
project's own setup); Playwright's own browser download is never used. A
missing browser fails these tests: it is never a skip.
"""

from __future__ import annotations

import os
import pathlib
import time
import typing as t

import pytest
import requests

from tests.support import fake_llm
from tests.support.servers import Server
from tests.support.servers import start_server

CHROMIUM = os.environ.get("MEMSVC_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def model() -> t.Iterator[fake_llm.FakeModel]:
    """The language model the server's extraction asks: a real HTTP server answering as
    OpenAI does (tests/support/fake_llm.py)."""
    with fake_llm.FakeModel() as m:
        yield m


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, model: fake_llm.FakeModel
) -> t.Iterator[Server]:
    s = start_server(
        tmp_path_factory.mktemp("console"),
        MEMSVC_RATE_LIMIT_PER_MINUTE="100000",
        MEMSVC_CONSOLE_SIGNIN_PER_MINUTE="1000",
        MEMSVC_LLM_URL=model.url,
        MEMSVC_LLM_MODEL="test-model",
        MEMSVC_EXTRACT_BACKOFF_SECONDS="0.01",
    )
    yield s
    s.stop()


# Package scope: Playwright's sync API keeps an event loop running in this
# thread until it stops, and asyncio.run() in later tests would then refuse.
@pytest.fixture(scope="package")
def browser() -> t.Iterator[t.Any]:
    if not pathlib.Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: run `make browser` (Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Watch:
    """What a page did that it must not: script errors, CSP violations, dialogs (alert)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []


@pytest.fixture
def watch() -> Watch:
    return Watch()


def new_page(browser: t.Any, watch: Watch, **options: t.Any) -> t.Any:
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 860}, **options})
    page = context.new_page()
    page.set_default_timeout(15_000)
    # An error status (a refused form's 403) is logged as a failed load: not a fault.
    page.on(
        "console",
        lambda m: (
            watch.errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on("pageerror", lambda e: watch.errors.append(str(e)))

    def dialog(d: t.Any) -> None:
        watch.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    return page


@pytest.fixture
def page(browser: t.Any, watch: Watch) -> t.Iterator[t.Any]:
    p = new_page(browser, watch)
    yield p
    p.context.close()
    assert watch.dialogs == [], "a page opened a dialog: script from the data ran"
    assert watch.errors == [], watch.errors


class Api:
    """memsvc's API, with one key, for putting data in place."""

    def __init__(self, server: Server, key: str):
        self.server, self.key = server, key

    def call(self, path: str, input: dict, mutation: bool = True) -> t.Any:
        url = f"{self.server.url}/trpc/{path}"
        headers = {"x-api-key": self.key}
        if mutation:
            r = requests.post(url, json=input, headers=headers, timeout=60)
        else:
            import json

            r = requests.get(url, params={"input": json.dumps(input)}, headers=headers, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["result"]["data"]

    def add(self, user: str, content: str, **extra: t.Any) -> dict:
        return self.call("memory.add", {"userId": user, "content": content, **extra})

    def settled(self, job_id: str, deadline: float = 60) -> dict:
        """The extraction job once the server's workers have run it (done or failed)."""
        end = time.monotonic() + deadline
        while True:
            job = self.call("memory.job", {"id": job_id}, mutation=False)
            if job["status"] in ("done", "failed") or time.monotonic() > end:
                return t.cast(dict, job)
            time.sleep(0.05)


def sign_in(page: t.Any, server: Server, secret: str, *, token: bool = False) -> None:
    page.goto(server.url + "/console/sign-in")
    label = "Token" if token else "API key"
    page.get_by_label(label, exact=True).fill(secret)
    with page.expect_navigation():
        page.get_by_role(
            "button", name="Sign in to keys" if token else "Sign in", exact=True
        ).click()

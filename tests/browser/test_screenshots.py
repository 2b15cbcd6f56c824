"""docs/console.md's screenshots: each page of the console, with the data below.

``make screenshots`` runs this with ``CONSOLE_SCREENSHOTS=docs/console`` and
so rewrites the pictures; in the ordinary test run they go to a temporary
folder, and the test checks each page renders without a fault.
"""

from __future__ import annotations

import datetime
import os

from tests.browser.conftest import Api
from tests.browser.conftest import new_page
from tests.browser.conftest import sign_in
from tests.support import fake_llm
from tests.support.servers import REPO

PAGES = ["sign-in", "users", "user", "memory", "search", "keys", "service", "phone", "session",
         "message", "search-context", "jobs", "fact"]  # fmt: skip

MEMORIES = {
    "alice": [
        ("Alice is training for the Berlin marathon in September", {"topic": "sport"}),
        ("Alice runs ten kilometres every Sunday morning", {"topic": "sport"}),
        ("Alice is allergic to peanuts", {"topic": "health", "important": True}),
        ("Alice prefers answers in French", {"topic": "language"}),
        ("Alice's daughter starts school in the autumn", {"topic": "family"}),
        ("Alice works as a nurse on night shifts", {"topic": "work"}),
    ],
    "bob": [("Bob is vegetarian", {"topic": "food"}), ("Bob lives in Porto", {})],
    "carol": [("Carol plays the cello in an amateur orchestra", {"topic": "music"})],
    "dmitri": [("Dmitri is learning Japanese", {}), ("Dmitri's cat is called Miso", {})],
    "emma@example.com": [("Emma's flight to Oslo leaves on Friday", {"topic": "travel"})],
}

#: Alice's conversation with the assistant, a day apart.
CHAT = [
    {"role": "user", "name": "Alice", "content": "I ran 30 km yesterday, my longest run so far.",
     "at": "2026-05-10T07:45:00+00:00", "id": "c1"},
    {"role": "assistant", "content": "Well done! How did your legs feel afterwards?", "id": "c2"},
    {"role": "user", "name": "Alice", "content": "Heavy. My knee hurt a little after 25 km.",
     "at": "2026-05-10T07:47:00+00:00", "id": "c3"},
    {"role": "assistant", "content": "Rest it for two days and see a physio if it still hurts.",
     "id": "c4"},
    {"role": "user", "name": "Alice", "content": "The physio says it is fine. Back to training "
     "next week.", "at": "2026-05-12T18:05:00+00:00", "id": "c5"},
]  # fmt: skip


def _extract(api: Api, session: str, text: str, at: str) -> dict:
    """Alice's message, its facts drawn by the server's extraction; the job once it ended."""
    messages = [{"role": "user", "name": "Alice", "content": text, "at": at}]
    body = {"userId": "alice", "sessionId": session, "messages": messages, "extract": True}
    return api.settled(api.call("memory.ingest", body)["job"]["id"])


def test_screenshots_of_every_page(browser, watch, server, model, tmp_path):
    out = (
        REPO / os.environ["CONSOLE_SCREENSHOTS"]
        if os.environ.get("CONSOLE_SCREENSHOTS")
        else tmp_path
    )
    out.mkdir(parents=True, exist_ok=True)
    key = server.create_key("acme", "console")
    api = Api(server, key)
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=30)
    first = None
    for user, notes in MEMORIES.items():
        for content, metadata in notes:
            extra = {"expiresAt": soon.isoformat()} if "flight" in content else {}
            m = api.add(user, content, metadata=metadata, **extra)
            first = first or m
    assert first is not None
    chat = api.call("memory.ingest", {"userId": "alice", "sessionId": "coach-2026-05",
                                      "messages": CHAT})["memories"]  # fmt: skip
    api.call("memory.ingest", {"userId": "alice", "sessionId": "coach-2026-04", "messages": [
        {"role": "user", "name": "Alice", "content": "Which shoes for a marathon?",
         "at": "2026-04-20T12:00:00+00:00"},
        {"role": "assistant", "content": "Ones you have already run long in."}]})  # fmt: skip
    api.call("memory.update", {"id": first["id"], "content": first["content"].replace(
        "in September", "on 27 September, aiming for 3h45")})  # fmt: skip
    api.call("memory.update", {"id": first["id"], "metadata": {"topic": "sport", "goal": "3:45"}})
    _extract(api, "moving-1", "I live in Lisbon, near the river.", "2026-03-01T09:00:00+00:00")
    model.script(fake_llm.status(429, retry_after=0))  # one busy answer: a retry, then done
    moved = _extract(api, "moving-2", "I live in Porto since April.", "2026-04-20T09:00:00+00:00")
    model.script(fake_llm.status(401))  # a wrong key: failed at once
    _extract(api, "moving-3", "I train with the Porto runners club.", "2026-05-02T09:00:00+00:00")
    page = new_page(browser, watch, viewport={"width": 1100, "height": 720})
    try:
        page.goto(server.url + "/console/sign-in")
        page.screenshot(path=out / "sign-in.png")
        sign_in(page, server, key)
        page.screenshot(path=out / "users.png", full_page=True)
        page.goto(server.url + "/console/user?id=alice")
        page.screenshot(path=out / "user.png", full_page=True)
        page.goto(server.url + f"/console/memory?id={first['id']}")
        page.screenshot(path=out / "memory.png", full_page=True)
        page.goto(
            server.url + "/console/search?user=alice&q=Which+race+is+Alice+training+for%3F"
            "&mode=hybrid&limit=5&threshold=0.45"
        )
        page.screenshot(path=out / "search.png", full_page=True)
        page.goto(server.url + "/console/session?user=alice&id=coach-2026-05&at=2#m-2")
        page.screenshot(path=out / "session.png", full_page=True)
        page.goto(server.url + f"/console/memory?id={chat[2]['id']}")
        page.screenshot(path=out / "message.png", full_page=True)
        page.goto(
            server.url + "/console/search?user=alice&q=Did+her+knee+hurt+after+the+long+run%3F"
            "&mode=hybrid&limit=2&threshold=0.3&kinds=message&context=1"
        )
        page.screenshot(path=out / "search-context.png", full_page=True)
        page.goto(server.url + "/console/jobs")
        page.screenshot(path=out / "jobs.png", full_page=True)
        page.goto(server.url + f"/console/memory?id={moved['facts']['added'][0]}")
        page.screenshot(path=out / "fact.png", full_page=True)
        page.goto(server.url + "/console/service")
        page.screenshot(path=out / "service.png", full_page=True)
        sign_in(page, server, server.token("acme"), token=True)
        page.get_by_label("Name").fill("support dashboard")
        page.get_by_role("button", name="Create").click()
        page.screenshot(path=out / "keys.png", full_page=True)
    finally:
        page.context.close()
    phone = new_page(browser, watch, viewport={"width": 390, "height": 780})
    try:
        sign_in(phone, server, key)
        phone.goto(server.url + "/console/search?user=alice&q=food+allergy&threshold=0.3")
        phone.screenshot(path=out / "phone.png")
    finally:
        phone.context.close()
    assert watch.errors == [] and watch.dialogs == []
    assert sorted(p.stem for p in out.glob("*.png")) == sorted(PAGES)

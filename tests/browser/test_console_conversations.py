"""Conversations in the console, used as a person uses it: in Chromium, against gunicorn."""

from __future__ import annotations

import uuid

import pytest
import requests

from tests.browser.conftest import Api
from tests.browser.conftest import new_page
from tests.browser.conftest import sign_in
from tests.browser.test_console import PAYLOADS

pytestmark = pytest.mark.e2e

TRIP = [
    {"role": "user", "name": "Dana", "content": "We booked the trip to Porto yesterday.",
     "at": "2026-03-10T19:30:00+00:00", "id": "t1"},
    {"role": "assistant", "content": "Lovely! Which dates?", "id": "t2"},
    {"role": "user", "name": "Dana", "content": "The 4th to the 9th of April, by train.",
     "at": "2026-03-10T19:31:00+00:00", "id": "t3"},
    {"role": "assistant", "content": "Then pack for rain: April in Porto is wet.", "id": "t4"},
    {"role": "user", "name": "Dana", "content": "Noted, see you next week.", "id": "t5"},
]  # fmt: skip


@pytest.fixture
def account(server):
    """A new tenant's key, and the API for that key."""
    key = server.create_key(f"t-{uuid.uuid4().hex[:8]}", "console")
    return key, Api(server, key)


def test_from_a_user_to_a_session_to_a_message_and_back(page, server, account):
    key, api = account
    api.call("memory.ingest", {"userId": "dana", "sessionId": "trip", "messages": TRIP})
    older = [{"role": "user", "content": "An older chat", "at": "2026-01-02T08:00:00+00:00"}]
    api.call("memory.ingest", {"userId": "dana", "sessionId": "older", "messages": older})
    sign_in(page, server, key)
    page.goto(server.url + "/console/user?id=dana")
    rows = page.locator("table.sessions tbody tr")
    assert [r.split("\t") for r in rows.all_inner_texts()] == [
        ["trip", "5", "2026-03-10 19:30:00.000 UTC", "2026-03-10 19:31:00.000 UTC"],
        ["older", "1", "2026-01-02 08:00:00.000 UTC", "2026-01-02 08:00:00.000 UTC"],
    ]
    with page.expect_navigation():
        page.get_by_role("link", name="trip", exact=True).click()
    assert page.get_by_role("heading", level=1).inner_text() == "Session trip"
    messages = page.locator("ol.conversation > li.message")
    assert messages.count() == 5
    assert messages.locator(".content").all_inner_texts() == [m["content"] for m in TRIP]
    first = messages.first.inner_text()
    assert "#0" in first and "Dana" in first and "user" in first
    assert "2026-03-10 19:30:00.000 UTC" in first
    # Its dates as "text → start..end", resolved against when it was said.
    assert messages.first.locator(".dates li").inner_text() == "“yesterday” → 2026-03-09"
    assert messages.nth(4).locator(".dates li").inner_text() == (
        "“next week” → 2026-03-16..2026-03-22"
    )
    assert "assistant" in messages.nth(1).locator(".speaker").inner_text()
    with page.expect_navigation():
        page.get_by_role("link", name="The memory of message 2").click()
    assert page.get_by_test_id("kind").inner_text() == "message"
    assert page.get_by_test_id("speaker").inner_text() == "Dana"
    assert page.get_by_test_id("role").inner_text() == "user"
    assert page.get_by_test_id("position").inner_text() == "2"
    assert page.get_by_test_id("occurred").inner_text() == "2026-03-10 19:31:00.000 UTC"
    assert page.get_by_test_id("dates").inner_text() == "“the 9th of April” → 2026-04-09"
    # Back to the conversation, at this message.
    with page.expect_navigation():
        page.get_by_test_id("session").click()
    assert page.url.endswith("#m-2")
    here = page.locator("li.message.here")
    assert here.count() == 1 and "The 4th to the 9th of April" in here.inner_text()
    assert "this message" in here.inner_text()
    with page.expect_navigation():
        page.locator(".crumbs a.uid").click()
    assert page.get_by_role("heading", level=1).inner_text() == "dana"


def test_search_shows_a_message_inside_its_conversation(page, server, account):
    key, api = account
    api.call("memory.ingest", {"userId": "dana", "sessionId": "trip", "messages": TRIP})
    sign_in(page, server, key)
    page.goto(server.url + "/console/search?user=dana")
    page.get_by_label("Query", exact=True).fill("Which dates is the Porto trip?")
    # Kinds, context and time are folded away until asked for (or set).
    assert not page.get_by_label("message", exact=True).is_visible()
    page.get_by_text("Kinds, context and time").click()
    page.get_by_label("message", exact=True).check()
    page.get_by_label("Context", exact=False).fill("1")
    page.get_by_label("Mode", exact=True).select_option("semantic")
    page.get_by_role("slider", name="Threshold").evaluate("el => { el.value = '0.2'; }")
    with page.expect_navigation():
        page.get_by_role("button", name="Search").click()
    assert "kinds=message" in page.url and "context=1" in page.url
    # The form remembers what was asked.
    assert page.get_by_label("message", exact=True).is_checked()
    assert not page.get_by_label("memory", exact=True).is_checked()
    assert page.get_by_label("Context", exact=False).input_value() == "1"
    best = page.locator("ol.results").first.locator(".result").first
    conversation = best.locator("ol.in-result > li.message")
    assert conversation.count() in (2, 3)  # the first or last message has one side only
    found = best.locator("li.message.here")
    assert found.count() == 1 and "found" in found.inner_text()
    hit = found.locator(".content").inner_text()
    position = next(i for i, m in enumerate(TRIP) if m["content"] == hit)
    texts = conversation.locator(".content").all_inner_texts()
    assert texts == [m["content"] for m in TRIP[max(0, position - 1) : position + 2]]
    with page.expect_navigation():
        best.get_by_role("link", name="in its session").click()
    assert page.url.endswith(f"#m-{position}")
    assert page.locator("li.message.here .content").inner_text() == hit
    # Time bounds and the time fields are kept in the form's URL and shown again.
    page.goto(server.url + "/console/search?user=dana&q=Porto&threshold=0")
    page.get_by_text("Kinds, context and time").click()
    page.get_by_label("Happened after (UTC)").fill("2026-03-10T19:30:30")
    page.get_by_label("Time in the query").select_option("off")
    page.get_by_label("Asked at (UTC)").fill("2026-03-11T09:00:30")
    with page.expect_navigation():
        page.get_by_role("button", name="Search").click()
    assert "occurredAfter=2026-03-10T19%3A30%3A30" in page.url and "time=off" in page.url
    assert page.get_by_label("Happened after (UTC)").input_value() == "2026-03-10T19:30:30"
    assert page.get_by_label("Time in the query").input_value() == "off"
    assert page.get_by_label("Asked at (UTC)").input_value() == "2026-03-11T09:00:30"
    assert page.get_by_role("alert").count() == 0


def test_hostile_conversations_render_inert(page, server):
    key = server.create_key(f"t-{uuid.uuid4().hex[:8]}", "console")
    api = Api(server, key)
    user = PAYLOADS[0]
    for i, payload in enumerate(PAYLOADS):
        messages = [
            {"role": "user", "name": payload, "content": f"{payload} said yesterday {i}"},
            {"role": "assistant", "name": PAYLOADS[-1 - i], "content": f"{payload} answer {i}"},
        ]
        api.call("memory.ingest", {"userId": user, "sessionId": payload, "messages": messages})
    sign_in(page, server, key)
    quoted = requests.utils.quote(user, safe="")
    urls = [f"/console/user?id={quoted}"]
    urls += [
        f"/console/session?user={quoted}&id={requests.utils.quote(p, safe='')}&at=1"
        for p in PAYLOADS
    ]
    first = api.call("memory.session", {"userId": user, "sessionId": PAYLOADS[1]}, False)
    urls += [f"/console/memory?id={m['id']}" for m in first]
    urls += [
        f"/console/search?user={quoted}&q={requests.utils.quote(p, safe='')}&threshold=0"
        f"&context=2&kinds=message"
        for p in PAYLOADS
    ]
    for url in urls:
        page.goto(server.url + url)
        assert page.locator("script:not([src])").count() == 0, url
        assert page.locator("img, b, svg[onload]").count() == 0, url
        assert page.locator("a[href^='javascript:']").count() == 0, url
    # Shown as text: the session's id, its speakers and its messages.
    page.goto(server.url + f"/console/user?id={quoted}")
    assert sorted(page.locator("table.sessions a.uid").all_inner_texts()) == sorted(PAYLOADS)
    with page.expect_navigation():
        page.locator("table.sessions a.uid", has_text="onerror").click()
    assert page.locator("h1 .uid").inner_text() == PAYLOADS[1]
    assert page.locator(".speaker").all_inner_texts() == [PAYLOADS[1], PAYLOADS[-2]]
    assert page.locator(".content").first.inner_text() == f"{PAYLOADS[1]} said yesterday 1"


def test_conversation_pages_fit_a_phone_width_screen(browser, watch, server, account):
    key, api = account
    api.call("memory.ingest", {"userId": "ivy", "sessionId": "s" * 80, "messages": TRIP})
    page = new_page(browser, watch, viewport={"width": 375, "height": 740})
    try:
        sign_in(page, server, key)
        for url in [
            "/console/user?id=ivy",
            f"/console/session?user=ivy&id={'s' * 80}&at=2",
            "/console/search?user=ivy&q=Porto+trip+dates&threshold=0&context=2&kinds=message",
        ]:
            page.goto(server.url + url)
            assert page.evaluate("document.documentElement.scrollWidth") <= 375, url
    finally:
        page.context.close()
    assert watch.errors == []

"""The console's conversations: a user's sessions, a session's messages, a message's memory page,
and the search playground's kinds, time bounds and context; on every store."""

import datetime
import html
import re

import pytest

from tests.http.test_console_http import sign_in

DINNER = [
    {"role": "user", "name": "Dana", "content": "We cooked ramen yesterday.",
     "at": "2023-05-08T19:00:00+00:00", "id": "d1"},
    {"role": "assistant", "content": "How did the broth turn out?", "id": "d2"},
    {"role": "user", "name": "Dana", "content": "Too salty, I will use less miso next time.",
     "at": "2023-05-08T19:02:00+00:00", "id": "d3"},
    {"role": "assistant", "content": "Half the miso then, and taste as you go.", "id": "d4"},
    {"role": "user", "name": "Dana", "content": "Thanks, see you next week.", "id": "d5"},
]  # fmt: skip


@pytest.fixture
def api(client, key):
    """Calls memsvc's API with the key; the client is signed in with it too."""
    assert sign_in(client, key).status_code == 302

    def call(path, input):
        answer = client.post(f"/trpc/{path}", json=input, headers={"x-api-key": key})
        assert answer.status_code == 200, answer.text[:300]
        return answer.json["result"]["data"]

    return call


def ingest(api, session_id, messages, user="dana"):
    return api("memory.ingest", {"userId": user, "sessionId": session_id, "messages": messages})


def texts(page, css_class):
    """The text of each element of ``css_class`` (a paragraph) on a page, unescaped."""
    found = re.findall(rf'<p class="{css_class}">(.*?)</p>', page.text, re.S)
    return [html.unescape(f) for f in found]


def test_a_users_page_lists_their_sessions_latest_first_paged(client, api):
    for day in range(12):
        at = f"2023-05-{day + 1:02d}T10:00:00+00:00"
        messages = [{"role": "user", "content": f"day {day}", "at": at}] * (day % 3 + 1)
        ingest(api, f"s-{day:02d}", messages)
    api("memory.add", {"userId": "dana", "content": "a plain note"})
    page = client.get("/console/user", query_string={"id": "dana"})
    assert page.status_code == 200
    rows = re.findall(r'<tr>\s*<td><a class="uid" href="([^"]+)">([^<]+)</a></td>\s*'
                      r'<td class="num">(\d+)</td>\s*<td><time datetime="([^"]+)"',
                      page.text)  # fmt: skip
    # The latest first, ten to a page; each with its count and its first message's time.
    assert [r[1] for r in rows] == [f"s-{d:02d}" for d in range(11, 1, -1)]
    assert [int(r[2]) for r in rows] == [d % 3 + 1 for d in range(11, 1, -1)]
    assert rows[0][3] == "2023-05-12T10:00:00.000Z"
    assert html.unescape(rows[0][0]) == "/console/session?user=dana&id=s-11"
    more = re.search(r'<a rel="next" href="([^"]+)">Earlier sessions</a>', page.text)
    assert more is not None
    # The memories are still listed below, plain ones and messages alike.
    assert "a plain note" in texts(page, "content")
    assert '<span class="tag">message</span>' in page.text
    older = client.get(html.unescape(more.group(1)))
    assert re.findall(r'id=(s-\d\d)">', older.text) == ["s-01", "s-00"]
    assert "Latest sessions" in older.text and "Earlier sessions" not in older.text
    # The memories' own pager keeps the sessions' place, and the other way round.
    assert "a plain note" in texts(older, "content")


def test_a_user_without_conversations_sees_no_sessions(client, api):
    api("memory.add", {"userId": "erin", "content": "a note"})
    page = client.get("/console/user", query_string={"id": "erin"})
    assert page.status_code == 200
    assert "Conversations" not in page.text and "a note" in texts(page, "content")


def test_a_session_page_is_the_conversation_in_order(client, api):
    made = ingest(api, "dinner", DINNER)["memories"]
    page = client.get("/console/session", query_string={"user": "dana", "id": "dinner"})
    assert page.status_code == 200
    assert texts(page, "content") == [m["content"] for m in DINNER]
    messages = re.findall(r'<li class="message role-(\w+)" id="m-(\d+)">(.*?)</li>\n', page.text,
                          re.S)  # fmt: skip
    assert [(role, int(p)) for role, p, _ in messages] == [
        (m["role"], i) for i, m in enumerate(DINNER)
    ]
    first = messages[0][2]
    assert '<strong class="speaker">Dana</strong> <span class="tag role">user</span>' in first
    assert '<time datetime="2023-05-08T19:00:00.000Z">2023-05-08 19:00:00.000 UTC</time>' in first
    # Its dates, resolved against when it was said; a message links to its memory.
    assert '“yesterday” → <time datetime="2023-05-07">2023-05-07</time></li>' in first
    assert f'href="/console/memory?id={made[0]["id"]}"' in first
    # An assistant without a name is shown by its role; next week is a range.
    assert '<strong class="speaker">assistant</strong>' in messages[1][2]
    assert '“next week” → <time datetime="2023-05-15">2023-05-15</time>..' in page.text
    assert "Later messages" not in page.text and "First messages" not in page.text


def test_a_long_session_is_paged_and_opened_at_a_message(client, api):
    ingest(api, "long", [{"role": "user", "content": f"line {i}"} for i in range(60)])
    page = client.get("/console/session", query_string={"user": "dana", "id": "long"})
    assert texts(page, "content") == [f"line {i}" for i in range(50)]
    later = re.search(r'<a rel="next" href="([^"]+)">Later messages</a>', page.text)
    assert later is not None
    rest = client.get(html.unescape(later.group(1)))
    assert texts(rest, "content") == [f"line {i}" for i in range(50, 60)]
    assert "First messages" in rest.text
    # Opened at a message: it is marked, with a few messages before it.
    at = client.get("/console/session", query_string={"user": "dana", "id": "long", "at": "20"})
    assert texts(at, "content")[:4] == ["line 17", "line 18", "line 19", "line 20"]
    assert re.search(r'<li class="message role-user here" id="m-20">', at.text)
    assert at.text.count(" here") == 1 and "From the first message" in at.text
    start = client.get("/console/session", query_string={"user": "dana", "id": "long", "at": "2"})
    assert texts(start, "content")[0] == "line 0" and 'here" id="m-2"' in start.text


def test_a_session_of_no_one_or_of_another_user_is_not_found(client, api):
    ingest(api, "private", DINNER[:1], user="frank")
    for user in ("dana", "nobody"):
        page = client.get("/console/session", query_string={"user": user, "id": "private"})
        assert page.status_code == 404
        assert "Session not found" in page.text and "No such session" in page.text


def test_a_messages_memory_page_shows_where_and_when_it_was_said(client, api):
    made = ingest(api, "dinner", DINNER)["memories"]
    page = client.get("/console/memory", query_string={"id": made[0]["id"]})
    assert page.status_code == 200
    said = re.search(r'<dl class="said".*?</dl>', page.text, re.S).group(0)
    assert '<dd data-testid="kind">message</dd>' in said
    assert '<time datetime="2023-05-08T19:00:00.000Z">' in said
    assert '<dd data-testid="speaker">Dana</dd>' in said
    assert '<dd data-testid="role">user</dd>' in said
    assert '<dd data-testid="position">0</dd>' in said
    assert "“yesterday” → <time" in said
    link = re.search(r'data-testid="session" href="([^"]+)">dinner</a>', said).group(1)
    assert html.unescape(link) == "/console/session?user=dana&id=dinner&at=0#m-0"
    # A memory added with memory.add shows none of it.
    plain = api("memory.add", {"userId": "dana", "content": "a plain note"})
    page = client.get("/console/memory", query_string={"id": plain["id"]})
    assert '<dl class="said"' not in page.text
    # One with an occurredAt shows when it happened, and its dates.
    backfilled = api("memory.add", {"userId": "dana", "content": "Moved to Ghent last March",
                                    "occurredAt": "2024-02-01T09:00:00+00:00"})  # fmt: skip
    page = client.get("/console/memory", query_string={"id": backfilled["id"]})
    assert "<dt>Happened</dt>" in page.text and "Kind" not in page.text
    assert "“last March” → " in page.text and "2023-03-01</time>..<time" in page.text


def search(client, **args):
    return client.get("/console/search", query_string={"user": "dana", "threshold": "0", **args})


def test_the_search_form_keeps_its_kinds_and_times(client, api):
    page = search(client, q="miso", kinds=["message", "fact"], occurredAfter="2023-05-08T19:01:00",
                  time="off", now="2023-05-09T08:00:00")  # fmt: skip
    assert page.status_code == 200
    ticked = re.findall(r'name="kinds" value="(\w+)" checked', page.text)
    assert ticked == ["message", "fact"]
    assert 'name="occurredAfter" type="datetime-local" step="1" value="2023-05-08T19:01:00"' in (
        page.text
    )
    assert '<option value="off" selected>' in page.text
    assert 'name="now" type="datetime-local" step="1" value="2023-05-09T08:00:00"' in page.text
    # What is set opens the folded fields; a search that sets none leaves them folded.
    assert '<details class="more" open>' in page.text
    plain = search(client, q="miso", time="auto", context="0")
    assert '<details class="more">' in plain.text


def test_a_search_by_kind_and_time_finds_only_those(client, api):
    ingest(api, "dinner", DINNER)
    api("memory.add", {"userId": "dana", "content": "Dana likes miso ramen"})
    everything = search(client, q="miso ramen", mode="keyword")
    assert "Dana likes miso ramen" in texts(everything, "content")
    assert "Too salty, I will use less miso next time." in texts(everything, "content")
    only = search(client, q="miso ramen", mode="keyword", kinds="memory")
    assert texts(only, "content") == ["Dana likes miso ramen"]
    messages = search(client, q="miso ramen", mode="keyword", kinds=["message", "fact"])
    assert "Dana likes miso ramen" not in texts(messages, "content")
    # The messages' time: those said after 19:01 only.
    after = search(client, q="miso", mode="keyword", kinds="message",
                   occurredAfter="2023-05-08T19:01:00")  # fmt: skip
    assert sorted(texts(after, "content")) == [
        "Half the miso then, and taste as you go.",
        "Too salty, I will use less miso next time.",
    ]
    before = search(client, q="miso", mode="keyword", occurredBefore="2023-05-08T19:01:00")
    assert texts(before, "content") == []


def test_a_message_found_is_shown_inside_its_conversation(client, api):
    ingest(api, "dinner", DINNER)
    page = search(client, q="salty broth miso", mode="keyword", kinds="message", context="1",
                  limit="1")  # fmt: skip
    assert page.status_code == 200
    (found,) = re.findall(r'<ol class="conversation in-result".*?</ol>', page.text, re.S)
    around = re.findall(r'<li class="message (around|here) role-(\w+)">.*?<p class="content">'
                        r"(.*?)</p>", found, re.S)  # fmt: skip
    assert around == [
        ("around", "assistant", "How did the broth turn out?"),
        ("here", "user", "Too salty, I will use less miso next time."),
        ("around", "assistant", "Half the miso then, and taste as you go."),
    ]
    assert "#2</span> <strong" in found and '<span class="tag">found</span>' in found
    link = re.search(r'href="([^"]+)">in its session</a>', page.text).group(1)
    assert html.unescape(link) == "/console/session?user=dana&id=dinner&at=2#m-2"
    assert 'id="context" name="context" type="number" min="0" max="10" value="1"' in page.text
    # Without context, the same hit is its text alone, with who said it and when.
    alone = search(client, q="salty broth miso", mode="keyword", kinds="message", limit="1")
    assert "in-result" not in alone.text
    assert texts(alone, "content") == ["Too salty, I will use less miso next time."]
    assert '<strong class="speaker">Dana</strong>' in alone.text


def query_time(page):
    """What the page says of the query's time, or None when the search did not rank by it."""
    found = re.search(r'<p class="note" data-testid="query-time">(.*?)</p>', page.text)
    return html.unescape(found.group(1)) if found else None


def test_time_and_now_are_sent_only_when_set(client, api):
    for content, at in [("I cooked a curry", "2023-05-07T18:00:00+00:00"),
                        ("I cooked a risotto", "2023-04-19T18:00:00+00:00")]:  # fmt: skip
        api("memory.add", {"userId": "dana", "content": content, "occurredAt": at})
    ask = {"q": "What did I cook yesterday?", "mode": "semantic"}
    # "on", with a moment: what falls inside the day before it comes first.
    may = search(client, **ask, time="on", now="2023-05-08T09:00:00")
    assert texts(may, "content")[0] == "I cooked a curry"
    assert query_time(may).startswith("The query's time: “yesterday” → 2023-05-07;")
    april = search(client, **ask, time="on", now="2023-04-20T09:00:00")
    assert texts(april, "content")[0] == "I cooked a risotto"
    assert query_time(april).startswith("The query's time: “yesterday” → 2023-04-19;")
    # No moment: the time of the call.
    before = datetime.datetime.now(datetime.UTC).date()
    today = search(client, **ask, time="on")
    after = datetime.datetime.now(datetime.UTC).date()
    assert query_time(today) in {
        f"The query's time: “yesterday” → {day - datetime.timedelta(days=1)}; "
        "what falls inside it ranks higher."
        for day in (before, after)
    }
    # "auto" sends nothing: semantic mode then ranks by meaning alone, as the API's default.
    auto = search(client, **ask, time="auto", now="2023-05-08T09:00:00")
    assert query_time(auto) is None
    # In hybrid mode the server's default is on; "off" turns it off.
    hybrid = {**ask, "mode": "hybrid", "now": "2023-05-08T09:00:00"}
    assert query_time(search(client, **hybrid)).startswith("The query's time: “yesterday”")
    assert query_time(search(client, **hybrid, time="off")) is None
    none = search(client, q="What did I cook?", mode="hybrid")
    assert query_time(none) == "The query names no time to rank by."

"""The console, used as a person uses it: in Chromium, against memsvc under gunicorn."""

from __future__ import annotations

import datetime
import http.server
import threading
import time
import uuid

import pytest
import requests

from tests.browser.conftest import Api
from tests.browser.conftest import new_page
from tests.browser.conftest import sign_in
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def account(server):
    """A new tenant, its key, and the API for that key."""
    t_ = tenant()
    key = server.create_key(t_, "console")
    return t_, key, Api(server, key)


def later(**delta: float) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(**delta)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- sign in and out ---------------------------------------------------------------------


def test_sign_in_shows_the_tenant_and_sign_out_ends_the_session(page, server, account):
    name, key, _ = account
    page.goto(server.url + "/console/")
    assert page.url.endswith("/console/sign-in")
    field = page.get_by_label("API key", exact=True)
    assert field.get_attribute("type") == "password"
    sign_in(page, server, key)
    assert page.url.endswith("/console/users")
    assert page.get_by_test_id("tenant").inner_text() == name
    # The key is in no URL, no page and no script-readable cookie.
    assert key not in page.url and key not in page.content()
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "memsvc_console"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert key not in cookie["value"]
    assert page.evaluate("document.cookie") == ""
    page.get_by_role("button", name="Sign out").click()
    assert "/console/sign-in" in page.url and "Signed out" in page.content()
    page.goto(server.url + "/console/users")
    assert "/console/sign-in" in page.url


def test_a_wrong_key_is_refused(page, server):
    sign_in(page, server, "sk_memsvc_" + "0" * 64)
    assert "/console/sign-in" in page.url
    assert "That API key was refused" in page.get_by_role("alert").inner_text()


def test_the_console_is_usable_by_keyboard(page, server, account):
    sign_in(page, server, account[1])
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "prefix"


# -- browsing ----------------------------------------------------------------------------


def test_users_are_listed_with_counts_paged_and_found_by_prefix(page, server, account):
    _, key, api = account
    for i in range(53):
        api.add(f"user-{i:02d}", "a note")
    api.add("user-07", "another note")
    sign_in(page, server, key)
    rows = page.locator("table.data tbody tr")
    assert rows.count() == 50
    assert rows.nth(7).inner_text().split("\t")[:2] == ["user-07", "2"]
    with page.expect_navigation():
        page.get_by_role("link", name="Next page").click()
    assert [r.split("\t")[0] for r in rows.all_inner_texts()] == ["user-50", "user-51", "user-52"]
    with page.expect_navigation():
        page.get_by_role("link", name="First page").click()
    assert rows.count() == 50
    page.get_by_label("User id starts with").fill("user-4")
    with page.expect_navigation():
        page.get_by_role("button", name="Find").click()
    assert [r.split("\t")[0] for r in rows.all_inner_texts()] == [f"user-4{i}" for i in range(10)]
    page.get_by_role("link", name="user-42").click()
    assert page.get_by_role("heading", level=1).inner_text() == "user-42"


def test_a_users_memories_newest_first_paged_filtered_with_expiry(page, server, account):
    _, key, api = account
    for i in range(30):
        api.add("dana", f"note number {i}", metadata={"even": i % 2 == 0, "n": i})
    api.add("dana", "expiring note", expiresAt=later(days=3))
    sign_in(page, server, key)
    page.goto(server.url + "/console/user?id=dana")
    contents = page.locator(".memory .content")
    assert contents.count() == 25
    assert contents.first.inner_text() == "expiring note"
    assert "expires" in page.locator(".memory").first.inner_text()
    assert contents.nth(1).inner_text() == "note number 29"
    with page.expect_navigation():
        page.get_by_role("link", name="Older").click()
    assert contents.all_inner_texts() == [f"note number {i}" for i in range(5, -1, -1)]
    with page.expect_navigation():
        page.get_by_role("link", name="Newest").click()
    page.get_by_label("Metadata filter").fill('{"even": true, "n": {"gte": 20}}')
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    assert contents.all_inner_texts() == [f"note number {i}" for i in (28, 26, 24, 22, 20)]
    # A time range: everything was created before tomorrow and nothing after it.
    tomorrow = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)).strftime(
        "%Y-%m-%dT%H:%M:%S"
    )
    page.get_by_label("Metadata filter").fill("")
    page.get_by_label("Created after (UTC)").fill(tomorrow)
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    assert contents.count() == 0 and "No memories match" in page.content()
    page.get_by_label("Created after (UTC)").fill("")
    page.get_by_label("Created before (UTC)").fill(tomorrow)
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    assert contents.count() == 25
    # A bad filter is the API's own 400, shown on the page.
    page.get_by_label("Metadata filter").fill('{"n": {"near": 3}}')
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    assert "BAD_REQUEST" in page.get_by_role("alert").inner_text()


# -- search ------------------------------------------------------------------------------


def test_search_with_the_threshold_slider(page, server, account):
    _, key, api = account
    api.add("eve", "Eve is training for the Berlin marathon")
    api.add("eve", "Eve runs ten kilometres every Sunday morning")
    api.add("eve", "Eve's favourite dish is ramen")
    api.add("eve", "The quarterly tax report is due in March")
    sign_in(page, server, key)
    page.get_by_role("link", name="Search").click()
    slider = page.get_by_role("slider", name="Threshold")
    # The model's recommended threshold is the starting point, and is marked.
    assert slider.input_value() == "0.35"
    assert "recommended for this model: 0.35" in page.content()
    page.get_by_label("User id", exact=True).fill("eve")
    page.get_by_label("Query", exact=True).fill("Which race is Eve running?")
    page.get_by_label("Mode", exact=True).select_option("semantic")
    page.get_by_role("button", name="Search").click()
    results = page.locator("ol.results").first.locator(".result")
    first = results.first.inner_text()
    assert "Berlin marathon" in first and "cosine" in first and "ranked by" in first
    assert page.locator("figure.chart svg rect").count() == 10
    assert page.locator("figure.chart line.recommended").count() == 1
    similarities = [float(s) for s in results.evaluate_all("l => l.map(e => e.dataset.similarity)")]
    assert similarities == sorted(similarities, reverse=True) and min(similarities) >= 0.35
    # Moving the slider greys, at once, what falls below it; letting go searches again.
    top = similarities[0]
    slider.evaluate(
        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }", str(top - 0.01)
    )
    assert page.locator("#threshold-value").inner_text() == f"{top - 0.01:.2f}"
    greyed = page.locator(".result.below-now").count()
    assert greyed == len(similarities) - 1
    with page.expect_navigation():
        slider.evaluate("el => el.dispatchEvent(new Event('change'))")
    assert f"threshold={top - 0.01:.2f}" in page.url
    assert results.count() == 1
    # What the lower threshold would add is shown greyed, just below.
    below = page.locator(".result.below")
    assert below.count() >= 1 and "below threshold" in below.first.inner_text()


# -- edit, history, delete ---------------------------------------------------------------


def test_edit_adds_a_version_and_the_history_shows_the_diff(page, server, account):
    _, key, api = account
    m = api.add("finn", "Finn drinks green tea", metadata={"topic": "drinks"})
    sign_in(page, server, key)
    page.goto(server.url + "/console/user?id=finn")
    page.get_by_role("link", name="History and edit of this memory").click()
    page.get_by_label("Content").fill("Finn drinks oolong tea every day")
    page.get_by_label("Metadata").fill('{"topic": "drinks", "since": 2024}')
    page.get_by_role("button", name="Save a new version").click()
    assert "Saved." in page.get_by_role("status").inner_text()
    newest = page.locator(".version").first
    assert "Version 2" in newest.inner_text()
    assert newest.locator("del").all_inner_texts()[0] == "green"
    assert "oolong" in " ".join(newest.locator("ins").all_inner_texts())
    assert '"since": 2024' in " ".join(newest.locator("pre ins").all_inner_texts())
    assert api.call("memory.getById", {"id": m["id"]}, mutation=False)["content"] == (
        "Finn drinks oolong tea every day"
    )
    # Invalid metadata is refused with the API's message, and nothing changes.
    page.get_by_label("Metadata").fill("[1, 2]")
    page.get_by_role("button", name="Save a new version").click()
    assert "metadata" in page.get_by_role("alert").inner_text()
    assert page.locator(".version").count() == 2
    # An expiry is set, shown, and cleared.
    page.get_by_label("Expires (UTC)").fill(later(days=2)[:19])
    page.get_by_role("button", name="Save a new version").click()
    assert "expires" in page.locator(".card .facts").inner_text()
    page.get_by_label("Expires (UTC)").fill("")
    page.get_by_role("button", name="Save a new version").click()
    assert "never expires" in page.locator(".card .facts").inner_text()


def test_delete_needs_its_box_ticked_and_delete_all_the_typed_user_id(page, server, account):
    _, key, api = account
    m = api.add("gus", "Gus keeps bees")
    api.add("gus", "Gus lives in Ghent")
    api.add("other", "stays")
    sign_in(page, server, key)
    page.goto(server.url + f"/console/memory?id={m['id']}")
    page.get_by_role("button", name="Delete", exact=True).click()
    # The browser refuses the form until the box is ticked: nothing was sent.
    assert "/console/memory" in page.url
    page.get_by_label("Delete it for good, with its history").check()
    page.get_by_role("button", name="Delete", exact=True).click()
    assert page.url.endswith("/console/user?id=gus")
    assert page.locator(".memory .content").all_inner_texts() == ["Gus lives in Ghent"]

    button = page.get_by_role("button", name="Delete all memories")
    confirm = page.get_by_label("Type the user id to confirm")
    assert button.is_disabled()
    confirm.fill("gu")
    assert button.is_disabled()
    confirm.fill("gus")
    assert button.is_enabled()
    button.click()
    assert "Deleted 1 memories of gus." in page.content()
    users = api.call("memory.users", {}, mutation=False)
    assert [u["userId"] for u in users] == ["other"]


def test_delete_all_with_a_wrong_confirmation_deletes_nothing(page, server, account):
    _, key, api = account
    api.add("hal", "Hal sails")
    sign_in(page, server, key)
    page.goto(server.url + "/console/user?id=hal")
    # Past the disabled button (no script): the server checks the typed id itself.
    page.get_by_label("Type the user id to confirm").fill("HAL")
    page.evaluate("document.querySelector('[data-enable-when-confirmed]').disabled = false")
    page.get_by_role("button", name="Delete all memories").click()
    assert "nothing was deleted" in page.content()
    assert len(api.call("memory.getAll", {"userId": "hal"}, mutation=False)) == 1


# -- keys --------------------------------------------------------------------------------


def test_keys_are_created_with_the_secret_shown_once_limited_and_revoked(page, server):
    name = tenant()
    sign_in(page, server, server.token(name), token=True)
    assert page.url.endswith("/console/keys")
    page.get_by_label("Name").fill("reporting job")
    page.get_by_role("button", name="Create").click()
    secret = page.get_by_label("Secret of the new key").input_value()
    assert secret.startswith("sk_memsvc_")
    assert secret not in page.url
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_role("button", name="Copy").click()
    page.get_by_role("button", name="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == secret
    # It works, and is never shown again.
    assert Api(server, secret).call("memory.users", {}, mutation=False) == []
    page.goto(server.url + "/console/keys")
    assert secret not in page.content()
    row = page.locator("tr", has_text="reporting job")
    # Its limits: lowered here, and they apply at once; raising is the operator's.
    row.get_by_label("per minute").fill("2")
    row.get_by_role("button", name="Set limits of key reporting job").click()
    row = page.locator("tr", has_text="reporting job")
    assert row.get_by_label("per minute").input_value() == "2"
    used = [
        requests.get(server.url + "/trpc/memory.users", headers={"x-api-key": secret}, timeout=30)
        for _ in range(2)
    ]
    # One call of this minute was made above: the second now is the third.
    assert [r.status_code for r in used] == [200, 429]
    row.get_by_label("at once").fill("100000")
    row.get_by_role("button", name="Set limits of key reporting job").click()
    assert "only the operator raises them" in page.content()
    page.goto(server.url + "/console/keys")
    row = page.locator("tr", has_text="reporting job")
    assert row.get_by_label("at once").input_value() == ""
    row.get_by_role("button", name="Revoke key reporting job").click()
    revoke = row.get_by_role("button", name="Revoke key reporting job")
    assert "/console/keys" in page.url and revoke.count() == 1
    row.get_by_label("sure").check()
    row.get_by_role("button", name="Revoke key reporting job").click()
    assert "revoked" in page.locator("tr", has_text="reporting job").inner_text()
    r = requests.get(server.url + "/trpc/memory.users", headers={"x-api-key": secret}, timeout=30)
    assert r.status_code == 401


# -- hostile data ------------------------------------------------------------------------

PAYLOADS = [
    "<script>alert('xss-script')</script>",
    "<img src=x onerror=\"alert('xss-img')\">",
    "\"><svg onload=alert('xss-svg')>",
    "javascript:alert('xss-href')",
    "</textarea><script>alert('xss-textarea')</script>",
    "{{ 7*7 }}<b>bold</b>",
]


def test_hostile_data_renders_inert_on_every_page(page, server):
    name = "<b>" + tenant() + "</b><script>alert('xss-tenant')</script>"
    key = server.create_key(name, "console")
    api = Api(server, key)
    ids = []
    for i, payload in enumerate(PAYLOADS):
        m = api.add(
            payload,
            f"{payload} memory {i}",
            metadata={payload: payload, "nested": {"x": [payload]}},
        )
        ids.append(m["id"])
    api.call("memory.update", {"id": ids[0], "content": PAYLOADS[1] + " edited"})
    token = server.token(name)
    requests.post(
        server.url + "/trpc/keys.create",
        json={"name": PAYLOADS[1]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ).raise_for_status()
    sign_in(page, server, key)
    assert page.get_by_test_id("tenant").inner_text() == name
    urls = ["/console/users", "/console/service"]
    urls += [f"/console/user?id={requests.utils.quote(p, safe='')}" for p in PAYLOADS]
    urls += [f"/console/memory?id={i}" for i in ids]
    urls += [
        f"/console/search?user={requests.utils.quote(p, safe='')}&q=memory&threshold=0"
        for p in PAYLOADS
    ]
    for url in urls:
        page.goto(server.url + url)
        assert page.locator("script:not([src])").count() == 0, url
        assert page.locator("img, b, svg[onload]").count() == 0, url
        assert page.locator("a[href^='javascript:']").count() == 0, url
        assert page.evaluate("window.__xss === undefined")
    # The text is shown as text.
    page.goto(server.url + f"/console/user?id={requests.utils.quote(PAYLOADS[0], safe='')}")
    assert page.get_by_role("heading", level=1).inner_text() == PAYLOADS[0]
    assert page.locator(".memory .content").first.inner_text() == PAYLOADS[1] + " edited"
    page.goto(server.url + f"/console/memory?id={ids[4]}")
    assert page.get_by_label("Content").input_value() == f"{PAYLOADS[4]} memory 4"
    sign_in(page, server, token, token=True)
    assert page.locator("td", has_text="onerror").first.inner_text() == PAYLOADS[1]
    assert page.locator("img").count() == 0
    # The page's own policy: no inline script or style, no framing.
    headers = page.request.get(server.url + "/console/keys").headers
    csp = headers["content-security-policy"]
    assert "'unsafe-inline'" not in csp and "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp and headers["x-frame-options"] == "DENY"


class _Attacker(http.server.BaseHTTPRequestHandler):
    """Another site: a page that posts a form to the console as soon as it loads."""

    target = ""

    def do_GET(self) -> None:
        body = (
            f'<form id="f" method="post" action="{self.target}/console/user/delete-all">'
            '<input name="id" value="victim"><input name="confirm" value="victim"></form>'
            "<script>document.getElementById('f').submit()</script>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_cross_site_post_is_refused(browser, watch, server, account):
    _, key, api = account
    api.add("victim", "must survive")
    page = new_page(browser, watch)
    try:
        sign_in(page, server, key)
        _Attacker.target = server.url
        attacker = http.server.HTTPServer(("127.0.0.1", 0), _Attacker)
        threading.Thread(target=attacker.serve_forever, daemon=True).start()
        try:
            host = f"http://localhost:{attacker.server_address[1]}/"
            with page.expect_navigation(url="**/console/**"):
                page.goto(host)
            assert "Deleted" not in page.content()
        finally:
            attacker.shutdown()
            attacker.server_close()
        # A same-site POST without the form's token is refused as well.
        r = page.request.post(
            server.url + "/console/user/delete-all", form={"id": "victim", "confirm": "victim"}
        )
        assert r.status == 403
    finally:
        page.context.close()
    assert len(api.call("memory.getAll", {"userId": "victim"}, mutation=False)) == 1


# -- sessions that end -------------------------------------------------------------------


def test_a_revoked_key_is_signed_out_at_its_next_request(page, server, account):
    name, key, _ = account
    sign_in(page, server, key)
    assert page.url.endswith("/console/users")
    (record,) = [k for k in _keys(server, name) if k["revokedAt"] is None]
    requests.post(
        server.url + "/trpc/keys.revoke",
        json={"id": record["id"]},
        headers={"Authorization": f"Bearer {server.token(name)}"},
        timeout=30,
    ).raise_for_status()
    page.reload()
    assert "/console/sign-in" in page.url
    assert "revoked" in page.get_by_role("status").inner_text()
    page.goto(server.url + "/console/users")
    assert "/console/sign-in" in page.url


def _keys(server, name):
    r = requests.get(
        server.url + "/trpc/keys.list",
        headers={"Authorization": f"Bearer {server.token(name)}"},
        timeout=30,
    )
    return r.json()["result"]["data"]


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    """Sessions idle out after 2 seconds; 3 sign-in attempts a minute."""
    s = start_server(
        tmp_path_factory.mktemp("strict"),
        MEMSVC_CONSOLE_IDLE_SECONDS="2",
        MEMSVC_CONSOLE_SIGNIN_PER_MINUTE="3",
    )
    yield s
    s.stop()


def test_an_idle_session_expires(page, strict_server):
    key = strict_server.create_key(tenant(), "idle")
    sign_in(page, strict_server, key)
    assert page.url.endswith("/console/users")
    page.reload()  # in use: still signed in
    assert page.url.endswith("/console/users")
    time.sleep(3)
    page.reload()
    assert "/console/sign-in" in page.url
    assert "without use" in page.get_by_role("status").inner_text()


def test_sign_in_attempts_are_rate_limited(page, strict_server):
    key = strict_server.create_key(tenant(), "limited")
    for _ in range(3):
        sign_in(page, strict_server, "sk_memsvc_wrong")
    sign_in(page, strict_server, key)
    assert "Too many sign-in attempts" in page.get_by_role("alert").inner_text()
    assert "/console/sign-in" in page.url


# -- phone width -------------------------------------------------------------------------


def test_pages_fit_a_phone_width_screen(browser, watch, server, account):
    _, key, api = account
    api.add("ivy", "Ivy is allergic to peanuts and keeps an epinephrine pen in her bag")
    page = new_page(browser, watch, viewport={"width": 375, "height": 740})
    try:
        sign_in(page, server, key)
        for url in ["/console/users", "/console/user?id=ivy", "/console/service",
                    "/console/search?user=ivy&q=food+allergy"]:  # fmt: skip
            page.goto(server.url + url)
            assert page.evaluate("document.documentElement.scrollWidth") <= 375, url
    finally:
        page.context.close()
    assert watch.errors == []

"""The web console at ``/console``: what memsvc knows about each end user, and why a search
found what it found.

Server-rendered pages (Jinja2, autoescaped), a stylesheet and one small
script, all served from here: no CDN, no build step, works offline. Every
page gets its data through :func:`.invoke.invoke`, i.e. the API's own
procedures with their checks and limits. Pages are hardened against the data
they show (user ids, memories, metadata and key names are untrusted): a
strict Content-Security-Policy without inline script or style, no framing, a
CSRF token on every state-changing form, and no secret in any URL.

One module per page area, on one blueprint (:mod:`.pages`, with what every
page is made with): :mod:`.signing_in` (sessions, sign-in and out, OpenID
Connect), :mod:`.user_pages` (end users and their memories),
:mod:`.search_page`, :mod:`.jobs_page` (extraction jobs), :mod:`.keys_page` and
:mod:`.service_page`. Below
them: :mod:`.session` (the cookie, and sessions signed out), :mod:`.oidc`
(the provider's two legs), :mod:`.invoke` (the API's procedures) and
:mod:`.diff` (a memory's versions compared).
"""

from __future__ import annotations

from flask import Flask

# Each page module adds its views to the blueprint as it is imported.
from . import jobs_page
from . import keys_page
from . import search_page
from . import service_page
from . import session as sessions
from . import signing_in
from . import user_pages
from .pages import bp

#: The page modules, each imported for the views it adds to :data:`bp`.
PAGES = (signing_in, user_pages, search_page, jobs_page, keys_page, service_page)


def init_app(app: Flask) -> None:
    if app.config["CONSOLE"]:
        # Made now, not at the first sign-in: a bad instance folder fails the start.
        sessions._fernet(app)
        app.register_blueprint(bp)

"""End-to-end tests: real gunicorn processes (see tests/support/servers.py)."""

from __future__ import annotations

import pytest

from tests.support.servers import start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("gunicorn"))
    yield s
    s.stop()

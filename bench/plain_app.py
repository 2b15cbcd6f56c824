"""memsvc as it was before request ids, its access line and metrics (bench/observability.py).

The same app, with the middleware that gives each request its id and writes
the access line taken off again; metrics are off (no MEMSVC_METRICS_*), and
gunicorn writes its own access line (--access-logfile -).
"""

from memsvc import create_app
from memsvc.observability.requests import RequestMiddleware

app = create_app()
assert isinstance(app.wsgi_app, RequestMiddleware)
app.wsgi_app = app.wsgi_app.app  # type: ignore[method-assign]

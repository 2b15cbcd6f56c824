"""The WSGI entry point: ``gunicorn wsgi:app``."""

from memsvc import ConfigError
from memsvc import create_app

try:
    app = create_app()
except ConfigError as e:
    raise SystemExit(f"memsvc: {e}") from None

"""``memsvc run``: serve the app with gunicorn and memsvc's gunicorn settings."""

from __future__ import annotations

import typing as t

from gunicorn.app.base import BaseApplication

from . import gunicorn_config


class Server(BaseApplication):
    def __init__(self, options: dict[str, t.Any]):
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for name in dir(gunicorn_config):
            if name in self.cfg.settings:
                self.cfg.set(name, getattr(gunicorn_config, name))
        for name, value in self.options.items():
            if value is not None:
                self.cfg.set(name, value)

    def load(self) -> t.Any:
        from . import ConfigError
        from . import create_app

        try:
            return create_app()
        except ConfigError as e:
            raise SystemExit(f"memsvc: {e}") from None

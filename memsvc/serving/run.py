"""``memsvc run``: serve the app with gunicorn and memsvc's gunicorn settings."""

from __future__ import annotations

import typing as t

from gunicorn.app.base import BaseApplication

from . import config


class Server(BaseApplication):
    """gunicorn with :mod:`memsvc.serving.config`, then ``options`` on top.

    ``memsvc run`` has read the settings, and printed its warnings about
    unknown ``MEMSVC_*`` names, before: the app does not repeat them.
    """

    def __init__(self, options: dict[str, t.Any]):
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        assert self.cfg is not None
        for name in config.__all__:
            self.cfg.set(name, getattr(config, name))
        for name, value in self.options.items():
            if value is not None:
                self.cfg.set(name, value)

    def load(self) -> t.Any:
        from .. import ConfigError
        from .. import create_app

        try:
            return create_app(warn_unknown=False)
        except ConfigError as e:
            raise SystemExit(f"memsvc: {e}") from None

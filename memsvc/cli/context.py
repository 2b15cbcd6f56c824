"""What every command shares: where its settings come from, its audit lines, its output."""

from __future__ import annotations

import dataclasses
import sys
import typing as t

import click

from .. import settings as settings_table
from ..embeddings import Embedder
from ..errors import ConfigError
from ..observability import audit
from ..observability import logs
from ..runtime import Runtime
from ..store import FullStore
from ..text import InvalidText
from ..text import check_text


@dataclasses.dataclass
class Context:
    """Where the command's settings come from; tests point it at their own."""

    instance_path: str | None = None
    overrides: t.Mapping[str, t.Any] | None = None
    #: An embedder to use instead of the configured one (tests).
    embedder: Embedder | None = None
    _settings: dict[str, t.Any] | None = None
    _runtime: Runtime | None = None

    @property
    def instance(self) -> str:
        return self.instance_path or settings_table.default_instance_path()

    def settings(self) -> dict[str, t.Any]:
        if self._settings is None:
            try:
                self._settings, warnings = settings_table.load(self.instance, self.overrides)
            except ConfigError as e:
                raise click.ClickException(str(e)) from None
            for warning in warnings:
                click.echo(f"warning: {warning}", err=True)
        return self._settings

    def runtime(self) -> Runtime:
        """The database, created or migrated; of any model (that is what reembed is for)."""
        if self._runtime is None:
            try:
                rt = Runtime(self.settings(), self.instance)
                if self.embedder is not None:
                    rt.embedder = self.embedder
                rt.prepare(check_embedder=False)
            except ConfigError as e:
                raise click.ClickException(str(e)) from None
            self._runtime = rt
            click.get_current_context().call_on_close(rt.close)
        return self._runtime

    def store(self) -> FullStore:
        return self.runtime().store()


pass_context = click.make_pass_decorator(Context, ensure=True)


def audit_command(ctx: Context, action: str, tenant: str | None, **details: t.Any) -> None:
    """One audit line for an administrative command: on stderr, and in MEMSVC_AUDIT_LOG."""
    logs.configure(ctx.settings()["LOG_FORMAT"])
    audit.configure(ctx.settings()["AUDIT_LOG"])
    audit.record(action, audit.operator(), tenant, **details)


def text_argument(name: str, value: str, max_chars: int) -> str:
    try:
        check_text(value, max_chars, printable=True)
    except InvalidText as e:
        raise click.BadParameter(str(e), param_hint=name) from None
    return value


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else words or word + 's'}"


class Progress:
    """click's progress bar on stderr, fed the count done so far; silent unless a terminal."""

    def __init__(self, label: str, stream: t.TextIO | None = None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.bar: t.Any = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = click.progressbar(
                length=total, label=self.label, file=self.stream, show_pos=True, show_eta=True
            )
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.render_finish()

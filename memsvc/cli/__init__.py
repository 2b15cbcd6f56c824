"""The ``memsvc`` command: serve, set up and maintain a memsvc deployment.

Commands read the same settings as the service (``memsvc settings`` shows
them) and work on its database directly; none needs the service running,
and ``reembed`` refuses to run while it is.

A module per group of commands: setting up and serving (``serve``), the
database as a whole (``data``), evaluating search (``evaluate``), API keys
(``keys``), extraction jobs (``jobs``); what they share is in ``context``.
"""

from __future__ import annotations

import click

from .. import __version__
from . import data
from . import evaluate
from . import jobs
from . import keys
from . import serve
from .context import Context

__all__ = ["Context", "cli", "main"]


@click.group(help="memsvc: long-term memory for AI applications.")
@click.version_option(__version__, "--version", prog_name="memsvc", message="%(prog)s %(version)s")
def cli() -> None:
    pass


for command in (
    serve.init_db, serve.token, serve.run, serve.show_settings,
    data.reembed, data.backup, data.export_command, data.import_command,
    evaluate.eval_command,
    keys.keys, jobs.jobs,
):  # fmt: skip
    cli.add_command(command)


def main() -> None:
    cli.main(prog_name="memsvc")

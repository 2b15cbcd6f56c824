"""The ``memsvc-mcp`` command, with a clear message when the MCP extra is missing."""

from __future__ import annotations

import sys
import typing as t

from ._extras import EXTRAS
from ._extras import message


def main(argv: t.Sequence[str] | None = None) -> None:
    """Run the MCP server, or say how to install it."""
    try:
        from .mcp_server import main as run
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in EXTRAS["mcp"][0]:
            raise
        sys.exit(message("memsvc-mcp", "mcp"))
    run(argv)

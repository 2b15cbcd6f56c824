"""Every setting memsvc has, in one table, and how they are read and checked.

A setting ``X`` comes, in increasing precedence, from its default below,
``instance/config.py`` (Python assignments: ``EMBEDDER = "openai"``), the
environment variable ``MEMSVC_X`` (parsed as JSON where it can be, so
``1536`` is a number and ``true`` a boolean; else kept as a string), and
the mapping a test passes to ``create_app``. :data:`SETTINGS` drives the
check at start-up (one line naming the first bad setting), ``memsvc
settings``, the CLI's help where a setting is an option's default, and the
table in ``docs/configuration.md`` (``memsvc settings --markdown``; a test
fails when the two disagree).
"""

from __future__ import annotations

from .reading import default_instance_path
from .reading import from_environment
from .reading import from_file
from .reading import load
from .reading import parse_env_value
from .reading import suggestions
from .reading import unknown_names
from .reading import validate
from .showing import DOCS_END
from .showing import DOCS_START
from .showing import database_shown
from .showing import markdown
from .showing import shown
from .showing import write_docs
from .table import BY_NAME
from .table import DEFAULTS
from .table import PREFIX
from .table import SECRETS
from .table import SETTINGS
from .table import Setting
from .table import non_negative_int
from .table import positive_int

__all__ = [
    "BY_NAME", "DEFAULTS", "DOCS_END", "DOCS_START", "PREFIX", "SECRETS", "SETTINGS", "Setting",
    "database_shown", "default_instance_path", "from_environment", "from_file", "load",
    "markdown", "non_negative_int", "parse_env_value", "positive_int", "shown", "suggestions",
    "unknown_names", "validate", "write_docs",
]  # fmt: skip

"""``python -m memsvc.cli``: the ``memsvc`` command."""

from . import main

main()

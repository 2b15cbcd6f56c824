"""What the service is doing: request ids, access and audit lines, Prometheus metrics.

:func:`memsvc.api.observe.install` puts it all on an app; the rest of
memsvc calls the hooks in :mod:`.requests`, :mod:`.metrics` and
:mod:`.audit`, each a line or two. Nothing here knows about Flask.
"""

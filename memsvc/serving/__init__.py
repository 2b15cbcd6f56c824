"""Serving memsvc with gunicorn: its settings, memsvc's worker class, ``memsvc run``."""

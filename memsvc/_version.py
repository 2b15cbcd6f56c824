"""memsvc's version, in a module of its own: the api reads it without importing the app."""

__version__ = "0.2.0"

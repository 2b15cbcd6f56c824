"""The rules for text fields, shared by the API's schemas and the ``memsvc`` command."""

from __future__ import annotations


class InvalidText(ValueError):
    """The text breaks a rule; the message says which, e.g. "must not be empty"."""


def check_unicode(value: str) -> None:
    # JSON can carry lone UTF-16 surrogates ("\ud800"), which are not text
    # and cannot be stored or sent back as UTF-8.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidText("must be valid Unicode text (it has a lone surrogate)") from None


def check_text(value: str, max_chars: int) -> None:
    """A string with at least one non-space character, at most ``max_chars`` long, no NUL."""
    if not value.strip():
        raise InvalidText("must not be empty")
    if len(value) > max_chars:
        raise InvalidText(f"must be at most {max_chars} characters long")
    if "\x00" in value:
        raise InvalidText("must not contain NUL characters")
    check_unicode(value)

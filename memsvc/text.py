"""The rules for text fields, shared by the API's schemas and the ``memsvc`` command."""

from __future__ import annotations

import unicodedata

# Control, format and line/paragraph separator characters: they move a
# terminal's cursor, retitle its window or hide text.
_UNPRINTABLE = ("Cc", "Cf", "Zl", "Zp")


class InvalidText(ValueError):
    """The text breaks a rule; the message says which, e.g. "must not be empty"."""


def check_unicode(value: str) -> None:
    # JSON can carry lone UTF-16 surrogates ("\ud800"), which are not text
    # and cannot be stored or sent back as UTF-8.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidText("must be valid Unicode text (it has a lone surrogate)") from None


def check_text(value: str, max_chars: int, *, printable: bool = False) -> None:
    """A string with at least one non-space character, at most ``max_chars`` long, no NUL.

    ``printable``: no control characters at all (names an operator's
    terminal shows).
    """
    if not value.strip():
        raise InvalidText("must not be empty")
    if len(value) > max_chars:
        raise InvalidText(f"must be at most {max_chars} characters long")
    if "\x00" in value:
        raise InvalidText("must not contain NUL characters")
    check_unicode(value)
    if printable and any(unicodedata.category(c) in _UNPRINTABLE for c in value):
        raise InvalidText("must not contain control characters")


def shown(value: str) -> str:
    """``value`` safe for a terminal: control characters as escapes (\\x1b, \\u202e)."""
    return "".join(
        c if unicodedata.category(c) not in _UNPRINTABLE else c.encode("unicode_escape").decode()
        for c in value
    )

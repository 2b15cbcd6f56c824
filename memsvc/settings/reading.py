"""Reading the settings: defaults, ``instance/config.py``, the environment; checked whole.

Also the names of the environment that are no setting, each with the
settings it most likely means.
"""

from __future__ import annotations

import difflib
import json
import os
import pathlib
import sys
import typing as t
from urllib.parse import urlsplit

from ..errors import ConfigError
from .table import DEFAULTS
from .table import PREFIX
from .table import SETTINGS


def parse_env_value(text: str) -> t.Any:
    """An environment value as JSON where it parses (``10``, ``true``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def from_environment(environ: t.Mapping[str, str]) -> dict[str, t.Any]:
    values: dict[str, t.Any] = {}
    for setting in SETTINGS:
        raw = environ.get(setting.env)
        if raw is None or raw == "":
            continue
        # A secret is a string whatever it looks like ("12345...").
        values[setting.name] = raw if setting.secret else parse_env_value(raw)
    return values


def from_file(path: str) -> dict[str, t.Any]:
    """The upper-case names assigned in a Python settings file, if it exists."""
    if not os.path.exists(path):
        return {}
    namespace: dict[str, t.Any] = {"__file__": path}
    try:
        with open(path, "rb") as f:
            exec(compile(f.read(), path, "exec"), namespace)  # noqa: S102 - the operator's file
    except Exception as e:
        raise ConfigError(f"{path} cannot be read: {type(e).__name__}: {e}") from None
    return {k: v for k, v in namespace.items() if k.isupper()}


def unknown_names(environ: t.Mapping[str, str]) -> list[str]:
    """Warnings for ``MEMSVC_*`` variables that are no setting, naming the closest ones."""
    known = {s.env for s in SETTINGS}
    out = []
    for name in sorted(environ):
        if not name.startswith(PREFIX) or name in known:
            continue
        close = suggestions(name)
        hint = ""
        if close:
            listed = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
            hint = f"; did you mean {listed}?"
        out.append(f"{name} is not a memsvc setting and is ignored{hint}")
    return out


#: Words for a part of a setting's name by another name: MEMSVC_PORT is MEMSVC_BIND's.
_SYNONYMS = {"DB": "DATABASE", "OPENAI": "EMBEDDING", "PORT": "BIND", "HOST": "BIND"}
#: How close a name must come to a setting's to be suggested (0 to 1).
_CUTOFF = 0.75


def suggestions(name: str, most: int = 3) -> list[str]:
    """The settings a mistyped ``MEMSVC_*`` name most likely means, best first.

    A setting scores what the better of two measures gives it: how alike
    the two names are as strings (``EMBEDING_MODEL``: ``EMBEDDING_MODEL``),
    and how many of the name's words, ``_`` apart, its own name holds, a
    misspelt word counting (``THRESHOLD``: ``SEARCH_DEFAULT_THRESHOLD``). So
    a name that is one word of several settings' names is ambiguous, and
    each of them is offered rather than whichever is nearest in spelling
    (``THREADS``). The prefix is no part of either: every name shares it.
    """
    typo = name.removeprefix(PREFIX).upper()
    words = [_SYNONYMS.get(w, w) for w in typo.split("_") if w]
    if not words:
        return []
    scored = []
    for order, setting in enumerate(SETTINGS):
        score = spelling = 0.0
        # WEB_CONCURRENCY is the setting WORKERS: either name may be meant.
        for own in {setting.name, setting.env.removeprefix(PREFIX)}:
            own_words = own.split("_")
            held = sum(any(_same_word(w, o) for o in own_words) for w in words) / len(words)
            alike = difflib.SequenceMatcher(None, typo, own).ratio()
            score, spelling = max(score, held, alike), max(spelling, alike)
        if score >= _CUTOFF:
            scored.append((-score, -spelling, order, setting.env))
    if not scored:
        return []
    scored.sort()
    best = -scored[0][0]
    return [env for score, _, _, env in scored if -score >= best - 0.05][:most]


def _same_word(word: str, own: str) -> bool:
    """The same word of a setting's name, or a misspelling of one (``THREDS``)."""
    if word == own:
        return True
    return min(len(word), len(own)) >= 4 and difflib.SequenceMatcher(None, word, own).ratio() >= 0.8


def load(
    instance_path: str,
    overrides: t.Mapping[str, t.Any] | None = None,
    environ: t.Mapping[str, str] | None = None,
) -> tuple[dict[str, t.Any], list[str]]:
    """The effective settings, checked, and warnings about names that are no setting.

    Keys of ``overrides`` that are no memsvc setting (Flask's ``TESTING``)
    pass through unchecked.
    """
    environ = os.environ if environ is None else environ
    values = dict(DEFAULTS)
    values.update(from_file(os.path.join(instance_path, "config.py")))
    values.update(from_environment(environ))
    if overrides:
        values.update(overrides)
    if values["DATABASE"] is None:
        values["DATABASE"] = os.path.join(instance_path, "memsvc.sqlite3")
    validate(values)
    return values, unknown_names(environ)


def validate(values: t.MutableMapping[str, t.Any]) -> None:
    """Check every setting, raising :class:`ConfigError` naming the first bad one."""
    for setting in SETTINGS:
        value = values.get(setting.name)
        if not setting.check(value):
            shown = "(hidden)" if setting.secret else repr(value)
            raise ConfigError(f"{setting.env} must be {setting.expected}, got {shown}")
    if (
        values["EMBEDDER"] == "local"
        and values["LOCAL_MODEL"] != "minilm"
        and values["LOCAL_MODEL_PATH"] is not None
    ):
        raise ConfigError(
            "MEMSVC_LOCAL_MODEL_PATH replaces the bundled MiniLM model; unset it to use "
            f"MEMSVC_LOCAL_MODEL={values['LOCAL_MODEL']}"
        )
    if values["LLM_URL"] is not None and values["LLM_MODEL"] is None:
        raise ConfigError("MEMSVC_LLM_MODEL must be set with MEMSVC_LLM_URL (the model to ask)")
    if values["EXTRACT"] == "on" and values["LLM_URL"] is None:
        raise ConfigError("MEMSVC_EXTRACT=on needs MEMSVC_LLM_URL (and MEMSVC_LLM_MODEL)")
    if (
        values["LLM_URL"] is not None
        and not values.get("LLM_API_KEY")
        and urlsplit(values["LLM_URL"]).hostname == "api.openai.com"
    ):
        raise ConfigError("MEMSVC_LLM_API_KEY must be set when MEMSVC_LLM_URL is the OpenAI API")
    if values["EMBEDDER"] == "openai" and not values.get("EMBEDDING_API_KEY"):
        # Local OpenAI-compatible servers often need no key; only the
        # OpenAI API itself is known to require one.
        if urlsplit(values["EMBEDDING_URL"]).hostname == "api.openai.com":
            raise ConfigError(
                "MEMSVC_EMBEDDING_API_KEY must be set when MEMSVC_EMBEDDER is openai "
                "and MEMSVC_EMBEDDING_URL is the OpenAI API"
            )


def default_instance_path() -> str:
    """``instance/`` beside the package, or ``<prefix>/var/memsvc-instance`` when installed.

    The same folder Flask would choose for the app.
    """
    root = pathlib.Path(os.path.abspath(__file__)).parents[2]  # memsvc/settings/reading.py
    if root.name in ("site-packages", "dist-packages"):
        return os.path.join(sys.prefix, "var", "memsvc-instance")
    return os.path.join(root, "instance")

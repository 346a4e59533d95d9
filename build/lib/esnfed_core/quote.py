"""Quoting input in error messages: a value or an exception text read from a file is shown cut to
about :data:`LIMIT` characters, on one line, so a hostile or broken file cannot make a message huge.
A list, tuple or set reads as YAML's flow list (``['walk', 'walk']``, the brackets kept so a
list is not mistaken for one value) and a mapping as YAML writes it (``{low: 10, high: 50}``),
not as a Python repr (``('walk', 'walk')``, ``{'low': 10}``)."""

from __future__ import annotations

import re
import reprlib
from itertools import islice
from typing import Any, Iterable, Mapping

LIMIT = 200  # characters of input a message may quote


class _Short(reprlib.Repr):
    """reprlib with every limit at LIMIT characters; huge ints are described, not converted
    (``repr`` of an int over 4300 digits raises, and converting one is quadratic)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = self.maxlong = LIMIT
        self.maxlevel = 3

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 640:  # about 190 digits
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT = _Short()
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,100}")


def _cut(text: str, limit: int) -> str:
    short = text[:limit].replace("\r", "\\r").replace("\n", "\\n")
    return short if len(text) <= limit else short + f"...({len(text)} characters)"


def _short(value: Any) -> str:
    try:
        return _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails must not hide the real error
        return f"<{type(value).__name__}>"


def _key(key: Any) -> str:
    """A mapping's key as YAML writes it: a plain name bare, anything else quoted."""
    return key if isinstance(key, str) and _PLAIN.fullmatch(key) else _short(key)


def _items(parts: Iterable[str], n: int, limit: int) -> str:
    """``parts`` joined by ", " (n of them in all), stopping once past ``limit`` characters."""
    text = ""
    for k, part in enumerate(parts):
        if k and len(text) + len(part) + 2 > limit:
            return f"{text}, ...({n} items)"
        text = part if k == 0 else f"{text}, {part}"
    return _cut(text, limit)


def quote(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)``, on one line and at most about ``limit`` characters; a list, tuple or set
    as ``[...]`` of its items' reprs joined by ", " and a mapping as ``{key: value, ...}`` (``an empty list`` /
    ``an empty mapping`` when empty)."""
    if isinstance(value, Mapping):
        pairs = (f"{_key(k)}: {_short(v)}" for k, v in islice(value.items(), limit))
        return "{" + _items(pairs, len(value), limit) + "}" if value else "an empty mapping"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=_short) if isinstance(value, (set, frozenset)) and len(value) <= limit else value
        parts = (_short(v) for v in islice(items, limit))
        return "[" + _items(parts, len(value), limit) + "]" if value else "an empty list"
    if isinstance(value, (str, bytes, bytearray)):
        text = repr(value[: limit + 1])
        text = text if len(value) <= limit else text[:limit] + f"...({len(value)} in all)"
        return text
    return _cut(_short(value), limit)


def quote_shape(shape: Any, limit: int = LIMIT) -> str:
    """An array shape as numpy writes it, ``(3, 4)`` / ``(5,)``, cut like :func:`quote`; a value
    that is not a tuple (a broken header) as :func:`quote` writes it."""
    if not isinstance(shape, tuple):
        return quote(shape, limit)
    inner = _items((_short(v) for v in islice(shape, limit)), len(shape), limit) if shape else ""
    return f"({inner}{',' if len(shape) == 1 else ''})"


def brief(exc_or_text: Any, limit: int = LIMIT) -> str:
    """The first line of an exception's message (or of a text), cut to about ``limit`` characters;
    the exception's type name when it has no message."""
    if isinstance(exc_or_text, BaseException):
        try:
            text = str(exc_or_text)
        except Exception:  # noqa: BLE001 - a message that fails to format must not hide the error
            text = ""
        text = text or type(exc_or_text).__name__
    else:
        text = str(exc_or_text)
    end = text.find("\n")
    return _cut(text if end < 0 else text[:end], limit)


def failure(exc: BaseException, limit: int = LIMIT) -> str:
    """What went wrong reading a document, for "(...)" after a message: a KeyError as
    "missing key 'users'", anything else as :func:`brief` (not ``KeyError('users')``)."""
    if isinstance(exc, KeyError) and exc.args:
        return f"missing key {quote(exc.args[0], limit)}"
    return brief(exc, limit)

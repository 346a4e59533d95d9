"""Quoting input in error messages: a value or an exception text read from a file is shown cut to
about :data:`LIMIT` characters, on one line, so a hostile or broken file cannot make a message huge."""

from __future__ import annotations

import reprlib
from typing import Any

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


def _cut(text: str, limit: int) -> str:
    short = text[:limit].replace("\r", "\\r").replace("\n", "\\n")
    return short if len(text) <= limit else short + f"...({len(text)} characters)"


def quote(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)``, on one line and at most about ``limit`` characters."""
    if isinstance(value, (str, bytes, bytearray)):
        text = repr(value[: limit + 1])
        text = text if len(value) <= limit else text[:limit] + f"...({len(value)} in all)"
        return text
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails must not hide the real error
        text = f"<{type(value).__name__}>"
    return _cut(text, limit)


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

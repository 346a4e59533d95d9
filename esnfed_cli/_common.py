"""Shared CLI plumbing: the error-to-exit-code mapping and the consoles."""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import typer
from rich.console import Console

from esnfed_core.errors import EsnfedError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable)

# Exit codes: 1 = bad input or params (a one-line message), 2 = usage error (Typer's own).
EXIT_FAILURE = 1


def fail(message: str) -> None:
    """Print one line naming the problem and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_FAILURE)


def handle_errors(fn: F) -> F:
    """Turn expected failures (bad files, bad params) into one line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EsnfedError as exc:
            fail(str(exc))
        except ValueError as exc:  # ParameterError and numpy/scipy shape errors from the core
            fail(str(exc))

    return wrapper  # type: ignore[return-value]


def in_range(low: float | None = None, high: float | None = None, *, low_open: bool = False,
             high_open: bool = False, not_zero: bool = False) -> Callable:
    """An option callback: a value outside [low, high] (or (low, high) where open), or 0 with
    ``not_zero``, is a usage error (exit 2) naming the option, before params.yaml is read."""

    def callback(value):
        if value is None:
            return value
        if (low is not None and (value <= low if low_open else value < low)) or (
            high is not None and (value >= high if high_open else value > high)
        ):
            lo = "-inf" if low is None else f"{low:g}"
            hi = "inf" if high is None else f"{high:g}"
            span = f"{'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"
            raise typer.BadParameter(f"must be in {span}, got {value:g}")
        if not_zero and value == 0:
            raise typer.BadParameter("must not be 0")
        return value

    return callback

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

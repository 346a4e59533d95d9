"""Shared CLI plumbing: the error-to-exit-code mapping (the only place that maps exceptions to
exit codes) and the consoles."""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import math
import os
import re
import signal
import threading
import traceback
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                           TimeElapsedColumn)

from esnfed_core.data.paths import output_folder_problem
from esnfed_core.errors import EsnfedError

console = Console()
err_console = Console(stderr=True)


def progress_bar(*columns: str | ProgressColumn) -> Progress:
    """A progress display on stdout, cleared when done; off where stdout is no terminal (a pipe,
    a log, `dvc repro`), where a cleared display would leave only a stray blank line."""
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def trial_progress() -> Progress:
    """Trials or models done of select, retrain, assess and privacy."""
    return progress_bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn())


def bar_task(bar: Progress, description: str):
    """A task on ``bar`` and the (done, total) callback the stages report progress to."""
    task = bar.add_task(description, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update


F = TypeVar("F", bound=Callable)

# Exit codes: 1 = bad input or params (a one-line message), 2 = usage error (Typer's own).
EXIT_FAILURE = 1


def fail(message: str) -> None:
    """Print one line naming the problem and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_FAILURE)


# `esnfed --debug` (or ESNFED_DEBUG=1) prints the traceback of a failure before its one line.
DEBUG_ENV = "ESNFED_DEBUG"
_debug = False


def set_debug(on: bool) -> None:
    global _debug
    _debug = on


def debug_enabled() -> bool:
    return _debug or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def os_error_line(exc: OSError) -> str:
    """One line naming the file(s) and the cause of an OSError (full disk, permissions, ...)."""
    if exc.errno in (errno.EEXIST, errno.ENOTDIR) and exc.filename is not None:
        # a folder to create where a file is (an output option naming a file): say so
        if (problem := output_folder_problem(exc.filename)) is not None:
            return problem
    cause = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno == errno.ENOSPC:
        cause = "no space left on device (free some space and run again)"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        cause = f"permission denied ({exc.strerror})" if exc.strerror else "permission denied"
    where = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    return f"{' -> '.join(where)}: {cause}" if where else cause


def params_file_named(message: str, params: object) -> str:
    """The stages name their params file "params.yaml: <key>: ..." and, where an output was computed
    with other values than the file's now (esnfed_stages/provenance.py, the budget and processed-data
    checks), "... but params.yaml's <key> is ..." or "... than params.yaml's now"; under ``--params
    FILE`` the line names FILE, the file actually read."""
    if not isinstance(params, Path) or params == Path("params.yaml"):
        return message
    prefix = "params.yaml: "
    if message.startswith(prefix):
        message = f"{params}: {message.removeprefix(prefix)}"
    return re.sub(r"(?<= )params\.yaml's ", lambda _: f"{params}'s ", message)


def handle_errors(fn: F) -> F:
    """Turn failures into one line and exit code 1: bad files and params, OS errors (full disk,
    permissions), running out of memory. Other exceptions are bugs and keep their traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (EsnfedError, ValueError, OSError, MemoryError) as exc:
            # ValueError: ParameterError and numpy/scipy shape errors from the core
            if debug_enabled():
                err_console.print(traceback.format_exc(), highlight=False, markup=False, soft_wrap=True, end="")
            if isinstance(exc, OSError):
                fail(os_error_line(exc))
            elif isinstance(exc, MemoryError):
                fail(f"out of memory in `esnfed {fn.__name__}`" + (f" ({exc})" if str(exc) else ""))
            fail(params_file_named(str(exc), kwargs.get("params")))

    return wrapper  # type: ignore[return-value]


class _Stopped(BaseException):
    """SIGTERM or SIGINT inside ``stop_cleanly`` (a BaseException: no ``except Exception`` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


IMPORT_LEFT = "its temporary files were removed and earlier outputs are untouched"
TRIALS_LEFT = "its worker processes were stopped; finished work is saved, rerun to resume"


@contextlib.contextmanager
def stop_cleanly(command: str, left: str = IMPORT_LEFT) -> Iterator[None]:
    """For the block, SIGTERM and SIGINT unwind the stack like an exception instead of ending the
    process where it stands, so every ``finally`` runs (temporary files removed, locks released, a
    joblib pool's workers killed: a worker left alone computes on after its parent is gone); then
    one line saying what was ``left`` and exit 128 + the signal, as a process killed by it would
    have. A second signal while unwinding is ignored, so it cannot cut the clean-up short."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        if not stopping:
            stopping = True
            raise _Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except _Stopped as exc:
        name = signal.Signals(exc.signum).name
        err_console.print(f"[bold red]error:[/] `esnfed {command}` stopped by {name}; {left}",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(128 + exc.signum) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def in_range(low: float | None = None, high: float | None = None, *, low_open: bool = False,
             high_open: bool = False, not_zero: bool = False, finite: bool = False) -> Callable:
    """An option callback: a value outside [low, high] (or (low, high) where open), 0 with
    ``not_zero``, or nan or infinity with ``finite``, is a usage error (exit 2) naming the option,
    before params.yaml is read."""

    def callback(value):
        if value is None:
            return value
        if finite and not math.isfinite(value):
            raise typer.BadParameter(f"must be a finite number, got {value}")
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


def folder_if_named(default: Path) -> Callable:
    """An option callback for an input folder the command reads when it is there (the report's
    privacy, Flower and data folders: their default may be absent, the stage not run): a folder
    named on the command line that is not there is a usage error (exit 2) naming the option, not
    a report quietly rendered without its tables."""

    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Path) -> Path:
        source = ctx.get_parameter_source(param.name)  # by name: typer may bundle its own click
        given = source is not None and source.name == "COMMANDLINE"
        if given and not Path(value).is_dir():
            what = "is not a folder" if Path(value).exists() else "not found"
            raise typer.BadParameter(f"{value}: {what}")
        return value

    return callback


def declared_dataset(params, name: str) -> str:
    """``--dataset``: a dataset params.yaml declares, else a usage error (exit 2) listing them."""
    from esnfed_stages.data._datasets import check_declared  # noqa: PLC0415 - keeps _common import-light

    return dataset_option(check_declared, params, name)


T = TypeVar("T")


def dataset_option(check: Callable[..., T], *args) -> T:
    """``check(*args)`` of a --dataset value; its refusal as a usage error naming --dataset (exit 2),
    as every command's bad --dataset is."""
    try:
        return check(*args)
    except EsnfedError as exc:
        raise typer.BadParameter(str(exc).removeprefix("--dataset: "), param_hint="--dataset") from None


def flowed(doc: str) -> str:
    """A docstring as help text: paragraphs (blank-line separated) kept, the line breaks inside a
    paragraph made spaces. Typer's rich mode keeps single newlines, so a docstring wrapped at the
    source's width would otherwise break mid-sentence in `esnfed --help` and `esnfed CMD --help`."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())

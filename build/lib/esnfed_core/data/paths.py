"""What an input path is, said in one line before anything reads it: a folder or a named pipe
(FIFO) where a file belongs is reported as what it is, never as "not found"; a file where a folder
belongs likewise. The path is only stat'ed, never opened: opening a FIFO would block the reader
until something writes to it. Every reader of a user's or a stage's input file checks it here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from esnfed_core.errors import DataError

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def path_problem(path: str | os.PathLike, missing: str = "file not found", *, folder: bool = False) -> str | None:
    """None when ``path`` is a regular file (a folder if ``folder``), symlinks followed; else why
    not: ``missing`` when nothing is there, or what is there instead."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there (a dangling link included)
        return missing
    except OSError as exc:  # e.g. a folder on the way without search permission
        return f"cannot be read ({exc.strerror})"
    if folder:
        return None if stat.S_ISDIR(mode) else ("is a file, expected a folder" if stat.S_ISREG(mode)
                                                else f"is not a folder: {_kind(mode)}")
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, expected a file"
    return f"is not a regular file: {_kind(mode)}"


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def check_input(path: str | os.PathLike, missing: str = "file not found", *, folder: bool = False) -> Path:
    """``path`` as a Path if it is a regular file (a folder if ``folder``); else DataError
    ("<path>: <problem>", see :func:`path_problem`)."""
    problem = path_problem(path, missing, folder=folder)
    if problem is not None:
        raise DataError(f"{path}: {problem}")
    return Path(path)


def output_folder_problem(path: str | os.PathLike) -> str | None:
    """Why folder ``path`` cannot be created or written into, "<where>: <problem>", when ``path``
    or a folder above it exists as something other than a folder (e.g. ``--out`` naming a file);
    None otherwise. Called on a failed mkdir, whose own "File exists" / "Not a directory" names
    neither the culprit nor the cure."""
    path = Path(path)
    for where in reversed((path, *path.parents)):
        if os.path.lexists(where) and (problem := path_problem(where, folder=True)) is not None:
            return f"{where}: {problem}"
    return None

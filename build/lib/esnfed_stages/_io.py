"""Output writing that survives crashes and concurrent runs, and small JSON helpers.

- ``atomic_path``: write a file or folder under a temporary sibling name, fsync it, and rename it
  over the target; a folder is swapped in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so
  the target never goes missing while it is replaced. Temporary names carry the pid and a
  random token: ``.<name>.<pid>.<token>.tmp``.
- ``output_lock``: an exclusive ``flock`` per output path (the lock file ``.<name>.lock`` beside
  it), so a second run on the same outputs stops with one line naming the folder and the pid
  holding it instead of interleaving its writes (or waits for it: ``set_lock_wait``).
- ``clean_stale_tmp``: under the lock, removes only this package's temporaries whose writer is
  no longer running (a killed run); any other file, a foreign ``.x.tmp`` included, is kept.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from esnfed_core.data import jsonfile, npz
from esnfed_core.errors import DataError

# ``.<name>.<pid>.<16 hex>.tmp``: the only temporaries this package writes and may delete.
_TMP = re.compile(r"^\..+\.(\d+)\.([0-9a-f]{16})\.tmp$")


class LockedError(DataError):
    """Another run holds the lock of an output path."""


_wait_for_locks = False


def set_lock_wait(on: bool) -> None:
    """Make ``output_lock`` wait for another run to finish instead of stopping (``esnfed --wait``)."""
    global _wait_for_locks
    _wait_for_locks = on


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename or a new entry in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    """fsync a file, or every file and folder under a folder (deepest first)."""
    if path.is_symlink():
        return
    if not path.is_dir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return
    for root, _dirs, files in os.walk(path, topdown=False):
        for name in files:
            _fsync_tree(Path(root, name))
        fsync_dir(root)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one atomic step; False where the system cannot (then the caller
    falls back to two renames)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # the file system or kernel lacks RENAME_EXCHANGE
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _replace_dir(new: Path, path: Path) -> None:
    """Put folder ``new`` at ``path``, an existing folder, never leaving ``path`` missing where
    the system can swap; the old content ends up at ``new`` (removed by the caller)."""
    if _exchange(new, path):
        return
    old = _tmp_sibling(path)
    os.replace(path, old)  # fallback: a short window without ``path``
    try:
        os.replace(new, path)
    except BaseException:
        os.replace(old, path)
        raise
    os.replace(old, new)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling path to write; on success fsync it and rename it over ``path``.

    Works for files and directories. On error the temporary is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = _tmp_sibling(path)
    try:
        yield tmp_path
        _fsync_tree(tmp_path)
        if path.is_dir() and tmp_path.is_dir():
            _replace_dir(tmp_path, path)
        else:
            os.replace(tmp_path, path)
        fsync_dir(path.parent)
    except OSError as exc:
        if exc.filename is None:  # a write or fsync on a descriptor (a full disk): name the output
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    finally:
        if tmp_path.is_dir() and not tmp_path.is_symlink():
            shutil.rmtree(tmp_path, ignore_errors=True)
        elif tmp_path.exists() or tmp_path.is_symlink():
            tmp_path.unlink()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_tmp(folder: str | os.PathLike) -> list[Path]:
    """Remove this package's temporaries in ``folder`` whose writing process no longer runs.

    Call it only while holding ``output_lock`` on the folder. Other files are never touched.
    """
    folder = Path(folder)
    removed = []
    if not folder.is_dir():
        return removed
    for p in folder.iterdir():
        m = _TMP.match(p.name)
        if m is None or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def lock_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def output_lock(path: str | os.PathLike) -> Iterator[Path]:
    """Hold an exclusive lock on the output ``path`` (a file or folder) for the block.

    Another process holding it makes this raise LockedError naming ``path`` and the holder's pid
    (or wait until it is free, after ``set_lock_wait(True)``). The lock file is removed on release; a waiter that then holds a removed file retries.
    """
    path = Path(path)
    lock = lock_path(path)
    created = _make_folder(lock.parent)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # a run that failed removed the folder it had made: make it again
            created += _make_folder(lock.parent)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if _wait_for_locks else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise LockedError(f"{path}: in use by another esnfed run (pid {holder}, lock {lock}); "
                              "wait for it to finish, or run `esnfed --wait ...`") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed this lock file as we opened it: take the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield lock
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        os.close(fd)
        _remove_empty(created)  # a failed run leaves no empty folders behind


def _remove_empty(created: list[Path]) -> None:
    """Remove the folders a run made (deepest first) while they are empty."""
    for folder in created:
        try:
            folder.rmdir()
        except OSError:  # holds outputs or another run's lock (or is gone): keep it and those above
            break


@contextlib.contextmanager
def made_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """``mkdir -p folder`` for the block; when the block fails, the folders it made are removed
    again while empty, so a failed run leaves no empty output root behind."""
    created = _make_folder(Path(folder))
    try:
        yield Path(folder)
    except BaseException:
        _remove_empty(created)
        raise


def _make_folder(folder: Path) -> list[Path]:
    """``mkdir -p folder``; return the folders this call created, deepest first."""
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


@contextlib.contextmanager
def output_locks(paths: list[Path]) -> Iterator[None]:
    """``output_lock`` on several paths, taken in a fixed order (no deadlock between runs)."""
    with contextlib.ExitStack() as stack:
        for p in sorted(dict.fromkeys(Path(p) for p in paths)):
            stack.enter_context(output_lock(p))
        yield


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, fixed indent) so equal results give equal bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, dumps_json(obj))


def read_json(path: str | os.PathLike, missing: str = "file not found") -> Any:
    """A JSON file as untrusted text (esnfed_core.data.jsonfile): DataError naming it otherwise
    (``missing``: the problem when nothing is at ``path``)."""
    return jsonfile.read_json(path, missing)


def write_npz(path: str | os.PathLike, **arrays: np.ndarray) -> None:
    """Uncompressed .npz (an open format: a zip of .npy files), written atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Load every array of an .npz without ever unpickling, memory bounded by the file's size
    (esnfed_core.data.npz: headers checked against their entries, inflation capped)."""
    return npz.read_npz(path)


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """The SHA-256 of a file's bytes, read in chunks (memory bounded by ``chunk``)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()

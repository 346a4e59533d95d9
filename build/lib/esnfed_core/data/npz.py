"""Reading .npz and .npy files as untrusted bytes: every array is built from a validated .npy
header and the bytes of its zip entry, never unpickled, with memory bounded by the file's size.

``np.load`` trusts the header: it allocates whatever shape the header declares and inflates a
deflated member as far as the zip entry claims (a 1 MB member can inflate to 1 GB). Here the
header must describe exactly the bytes its entry holds, and the entries read may together
inflate to at most :data:`MAX_EXPANSION` times the file's size plus :data:`SLACK_BYTES`.
"""

from __future__ import annotations

import math
import os
import struct
import zipfile
from pathlib import Path
from typing import IO, Iterable

import numpy as np

from esnfed_core.data.paths import check_input
from esnfed_core.errors import DataError
from esnfed_core.quote import brief, quote, quote_shape

MAX_EXPANSION = 64  # deflated entries read may inflate to this many times the file's size...
SLACK_BYTES = 64 << 20  # ...plus this (small files of well-compressed labels stay readable)
_CHUNK = 1 << 16  # read size: larger blocks cost an mmap and page faults each (1 MiB: 3x slower than np.load)
_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, struct.error,
           NotImplementedError, RuntimeError)  # RuntimeError: an encrypted entry


def read_npy_header(f: IO[bytes], path: Path, name: str) -> tuple[tuple[int, ...], np.dtype, bool]:
    """(shape, dtype, fortran order) of the .npy header at ``f``'s position (left just after it).

    Refuses format versions other than 1.0 and 2.0, dtypes holding Python objects and shapes
    that are not tuples of integers >= 0; ``name`` is the array's name in messages."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise DataError(f"{path}: array {quote(name)} has .npy format {version}, expected 1.0 or 2.0")
    if dtype.hasobject:
        raise DataError(f"{path}: array {quote(name)} holds Python objects (dtype {dtype}); "
                        "pickled arrays are never loaded")
    if not isinstance(shape, tuple) or any(type(d) is not int or d < 0 for d in shape):
        raise DataError(f"{path}: array {quote(name)} has shape {quote_shape(shape)} in its .npy header "
                        "(dimensions must be integers >= 0)")
    return shape, dtype, bool(fortran)


def _read_array(f: IO[bytes], size: int, path: Path, name: str) -> np.ndarray:
    """The array of the .npy stream ``f`` holding exactly ``size`` bytes (header included)."""
    shape, dtype, fortran = read_npy_header(f, path, name)
    head = f.tell()
    count = math.prod(shape)
    nbytes = count * dtype.itemsize  # Python ints: exact, no int64 wrap
    if head + nbytes != size:
        raise DataError(f"{path}: array {quote(name)}: its .npy header declares {nbytes} bytes of data, "
                        f"the entry holds {max(size - head, 0)}")
    arr = np.empty(count, dtype)
    buf = memoryview(arr.reshape(-1).view(np.uint8)) if nbytes else memoryview(b"")
    done = 0
    while done < nbytes:
        block = f.read(min(_CHUNK, nbytes - done))
        if not block:
            raise DataError(f"{path}: array {quote(name)} is truncated ({nbytes - done} bytes missing)")
        buf[done:done + len(block)] = block
        done += len(block)
    return arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)


def _entries(z: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The .npy entries of an .npz by array name (``x.npy`` -> ``x``), as ``np.load`` names them."""
    return {i.filename[:-4]: i for i in z.infolist() if i.filename.endswith(".npy")}


def npz_names(path: str | os.PathLike) -> list[str]:
    """The names of the arrays of an .npz, in file order (nothing is inflated)."""
    path = Path(path)
    check_input(path)
    try:
        with zipfile.ZipFile(path) as z:
            return list(_entries(z))
    except _ERRORS as exc:
        raise DataError(f"{path}: cannot read as .npz ({brief(exc)})") from None


def read_npz(path: str | os.PathLike, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays ``names`` of an .npz (every one by default) that it holds; the caller checks
    for missing ones. Corrupt, truncated, pickled or over-inflating entries are a DataError
    naming the file (and array) and the problem."""
    path = Path(path)
    check_input(path)
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as z:
            entries = _entries(z)
            wanted = list(entries) if names is None else [n for n in dict.fromkeys(names) if n in entries]
            budget = MAX_EXPANSION * size + SLACK_BYTES
            for n in wanted:
                info = entries[n]
                if info.compress_type == zipfile.ZIP_STORED:
                    if info.file_size != info.compress_size or info.header_offset + info.compress_size > size:
                        raise DataError(f"{path}: array {quote(n)} is truncated or its zip entry is corrupt "
                                        f"(declares {info.file_size} bytes stored in {info.compress_size}, "
                                        f"the file has {size})")
                elif info.compress_type == zipfile.ZIP_DEFLATED:
                    budget -= info.file_size
                    if budget < 0:
                        raise DataError(f"{path}: array {quote(n)} inflates to {info.file_size} bytes, beyond "
                                        f"{MAX_EXPANSION} times the file's {size} bytes (a zip bomb?); save it "
                                        "uncompressed (np.savez)")
                else:
                    raise DataError(f"{path}: array {quote(n)} uses zip compression method "
                                    f"{info.compress_type}; only stored or deflated entries are read")
            out = {}
            for n in wanted:
                with z.open(entries[n]) as f:
                    out[n] = _read_array(f, entries[n].file_size, path, n)
            return out
    except DataError:
        raise
    except _ERRORS as exc:
        raise DataError(f"{path}: cannot read as .npz ({brief(exc)})") from None


def read_npy(path: str | os.PathLike) -> np.ndarray:
    """The array of a .npy file (never unpickled; its header must match the file's size)."""
    path = Path(path)
    check_input(path)
    try:
        with open(path, "rb") as f:
            return _read_array(f, os.fstat(f.fileno()).st_size, path, path.stem)
    except DataError:
        raise
    except _ERRORS as exc:
        raise DataError(f"{path}: cannot read as .npy ({brief(exc)})") from None

"""Lazy window arrays: the windows of a processed .npz read from disk only when a batch asks for
them, and lazy selections and concatenations of them, so memory is bounded by the batch, not the data.

Reads are plain file reads (``readinto`` at an offset), never a memory map: mapped file pages count
in a process's resident memory, which would unbound the peak again. Only the first axis (windows)
is lazy; indexing it returns a real ``np.ndarray`` holding the requested windows, in the requested order.
"""

from __future__ import annotations

import math
import struct
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from esnfed_core.data.npz import read_npy_header
from esnfed_core.errors import DataError
from esnfed_core.quote import brief, quote

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a ZIP local file header (30 bytes)
_LOCAL_MAGIC = b"PK\x03\x04"


class Windows:
    """An array-like over windows: ``shape``, ``dtype``, ``ndim``, ``len`` and numpy-style
    indexing of the first axis (int, slice, boolean mask, integer index array), each returning
    an ``np.ndarray``. ``np.asarray`` materialises everything (meant for small data and tests)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple):  # windows first, then the other axes on the rows read
            if not key:
                return self[:]
            rows = self[key[0]]
            rest = key[1:]
            return rows[rest] if _is_int(key[0]) else rows[(slice(None),) + rest]
        if _is_int(key):
            n = len(self)
            i = int(key)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for {n} windows")
            return self._rows(np.array([i % n], np.intp))[0]
        idx = _positions(key, len(self))
        return self._rows(idx.reshape(-1)).reshape(idx.shape + self.shape[1:])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy is False:
            raise ValueError(f"{type(self).__name__}: windows on disk cannot be viewed without a copy")
        out = self._rows(np.arange(len(self), dtype=np.intp))
        return out if dtype is None else out.astype(dtype, copy=False)

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        """The windows at ``idx`` (1-D intp, each in range), in that order: a new array."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.shape} {self.dtype}>"


def _is_int(key: Any) -> bool:
    return isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_))


def _positions(key: Any, n: int) -> np.ndarray:
    """An index of the first axis as an intp array of positions in [0, n) (numpy's rules)."""
    if isinstance(key, slice):
        return np.arange(*key.indices(n), dtype=np.intp)
    arr = np.asarray(key)
    if arr.dtype == np.bool_:
        if arr.shape != (n,):
            raise IndexError(f"boolean index of shape {arr.shape} does not match {n} windows")
        return np.flatnonzero(arr)
    if arr.size == 0:
        return np.zeros(arr.shape, np.intp)
    if arr.dtype.kind not in "iu":
        raise IndexError(f"windows can be indexed by an int, a slice, a boolean mask or integers, not {quote(key)}")
    if arr.min() < -n or arr.max() >= n:
        raise IndexError(f"index {int(arr.min() if arr.min() < -n else arr.max())} is out of bounds for {n} windows")
    return np.where(arr < 0, arr + n, arr).astype(np.intp, copy=False)


class NpyMember(Windows):
    """The array ``name`` of an uncompressed .npz (as ``np.savez`` writes it), read on demand.

    The member's bytes are stored as is, so window ``i`` lies at a fixed offset of the file; each
    read opens the file, reads the requested windows in increasing order (one read per run of
    consecutive windows) and closes it, so the object holds no file handle and pickles freely.
    """

    def __init__(self, path: str | Path, name: str, dtype: Any):
        self.path = Path(path)
        self.name = name
        self.shape, self.dtype, self._offset = _locate(self.path, name, np.dtype(dtype))
        self._row_bytes = math.prod(self.shape[1:]) * self.dtype.itemsize

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx),) + self.shape[1:], self.dtype)
        if len(idx) == 0:
            return out
        if np.all(idx[1:] > idx[:-1]):  # increasing (slices, masks): read straight into out
            self._read_sorted(idx, out)
            return out
        uniq, inverse = np.unique(idx, return_inverse=True)
        rows = np.empty((len(uniq),) + self.shape[1:], self.dtype)
        self._read_sorted(uniq, rows)
        np.take(rows, inverse, axis=0, out=out)
        return out

    def _read_sorted(self, idx: np.ndarray, out: np.ndarray) -> None:
        """Read the windows ``idx`` (strictly increasing) into ``out``, one read per run."""
        starts = np.flatnonzero(np.diff(idx, prepend=-2) != 1)
        ends = np.append(starts[1:], len(idx))
        flat = out.reshape(-1).view(np.uint8)
        try:
            with open(self.path, "rb", buffering=0) as f:
                for a, b in zip(starts.tolist(), ends.tolist()):
                    f.seek(self._offset + int(idx[a]) * self._row_bytes)
                    _read_exact(f, memoryview(flat[a * self._row_bytes : b * self._row_bytes]), self.path)
        except OSError as exc:
            raise DataError(f"{self.path}: cannot read {self.name} ({brief(exc)})") from None

    def __reduce__(self):
        return (NpyMember, (self.path, self.name, self.dtype))


def _read_exact(f, buf: memoryview, path: Path) -> None:
    done = 0
    while done < len(buf):
        n = f.readinto(buf[done:])
        if not n:
            raise DataError(f"{path}: truncated (file ended {len(buf) - done} bytes early)")
        done += n


def _locate(path: Path, name: str, dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, offset of the first element in the file) of member ``name`` of the .npz."""
    member = f"{name}.npy"
    try:
        with zipfile.ZipFile(path) as z:
            try:
                info = z.getinfo(member)
            except KeyError:
                raise DataError(f"{path}: missing array '{name}'") from None
        if info.compress_type != zipfile.ZIP_STORED:
            raise DataError(f"{path}: array '{name}' is compressed (np.savez_compressed?); processed files "
                            f"are uncompressed .npz so windows can be read in place: rerun `esnfed preprocess`")
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(info.header_offset)
            head = f.read(_LOCAL_HEADER.size)
            if len(head) != _LOCAL_HEADER.size or head[:4] != _LOCAL_MAGIC:
                raise DataError(f"{path}: corrupt zip entry for '{name}'")
            fields = _LOCAL_HEADER.unpack(head)
            start = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
            f.seek(start)
            shape, found, fortran = read_npy_header(f, path, name)
            offset = f.tell()
    except DataError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, struct.error) as exc:
        raise DataError(f"{path}: cannot read ({brief(exc)})") from None
    if found != dtype:
        raise DataError(f"{path}: {name} has dtype {found}, expected {dtype}")
    if fortran and len(shape) > 1:
        raise DataError(f"{path}: {name} is stored in Fortran order, expected C order")
    if len(shape) < 1:
        raise DataError(f"{path}: {name} is a scalar, expected an array of windows")
    nbytes = math.prod(shape) * found.itemsize  # Python ints: exact, no int64 wrap
    if offset - start + nbytes != info.file_size:
        raise DataError(f"{path}: {name}: the .npy header says {nbytes} bytes of data, the zip entry "
                        f"holds {info.file_size - (offset - start)}")
    if offset + nbytes > size:
        raise DataError(f"{path}: truncated ({name} needs {offset + nbytes} bytes, the file has {size})")
    return tuple(int(s) for s in shape), found, offset


class Selection(Windows):
    """The windows ``index`` of ``base`` (any array-like of windows), read when indexed."""

    def __init__(self, base: Any, index: np.ndarray):
        self.base = base
        self.index = np.asarray(index, np.intp)
        if self.index.ndim != 1:
            raise ValueError(f"Selection: index must be 1-D, got shape {self.index.shape}")
        self.shape = (len(self.index),) + tuple(base.shape[1:])
        self.dtype = np.dtype(base.dtype)

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        return _rows_of(self.base, self.index[idx])


class Concatenation(Windows):
    """The windows of ``parts`` one after the other (as ``np.concatenate``), read when indexed."""

    def __init__(self, parts: Sequence[Any]):
        if not parts:
            raise ValueError("need at least one array to concatenate")
        tails = {tuple(p.shape[1:]) for p in parts}
        if len(tails) > 1:
            raise ValueError(f"concatenate: windows of different shapes {sorted(tails)}")
        self.parts = list(parts)
        self.offsets = np.cumsum([0] + [len(p) for p in self.parts])
        self.shape = (int(self.offsets[-1]),) + tails.pop()
        self.dtype = np.result_type(*[p.dtype for p in self.parts])  # np.concatenate's promotion

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx),) + self.shape[1:], self.dtype)
        which = np.searchsorted(self.offsets, idx, side="right") - 1
        for p in np.unique(which).tolist():
            pos = np.flatnonzero(which == p)
            out[pos] = _rows_of(self.parts[p], idx[pos] - self.offsets[p])
        return out


def _rows_of(x: Any, idx: np.ndarray) -> np.ndarray:
    return x._rows(idx) if isinstance(x, Windows) else x[idx]


def take(x: Any, key: Any) -> Any:
    """``x[key]`` along the windows: a copy for an in-memory array (as numpy does), a lazy
    :class:`Selection` for windows on disk."""
    if not isinstance(x, Windows):
        return x[key]
    idx = _positions(key, len(x))
    if idx.ndim != 1:
        raise IndexError(f"take: expected a 1-D selection of windows, got shape {idx.shape}")
    if isinstance(x, Selection):  # compose, so chains of selections stay one level deep
        return Selection(x.base, x.index[idx])
    return Selection(x, idx)


def concat(parts: Sequence[Any]) -> Any:
    """The windows of ``parts`` one after the other: ``np.concatenate`` when every part is in
    memory, a lazy :class:`Concatenation` as soon as one part is on disk."""
    parts = list(parts)
    if not any(isinstance(p, Windows) for p in parts):
        return np.concatenate(parts)
    flat: list[Any] = []
    for p in parts:  # nested concatenations are flattened: one lookup per read
        flat.extend(p.parts if isinstance(p, Concatenation) else [p])
    if len(flat) == 1:
        return flat[0]
    return Concatenation(flat)

"""A writer of Python-2-style pickles (protocol 2, byte strings as py2 `str`, numpy 1.x array
layout), so generated files need `encoding='latin1'` to load, exactly like the real WESAD pickles."""

from __future__ import annotations

import struct
from typing import Any, BinaryIO

import numpy as np

# Opcodes (pickletools names) of protocol 2.
PROTO, STOP, MARK = b"\x80", b".", b"("
EMPTY_DICT, SETITEMS, EMPTY_LIST, APPENDS = b"}", b"u", b"]", b"e"
TUPLE, TUPLE1, TUPLE3, REDUCE, BUILD = b"t", b"\x85", b"\x87", b"R", b"b"
GLOBAL, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET = b"c", b"q", b"r", b"h", b"j"
NONE, NEWTRUE, NEWFALSE = b"N", b"\x88", b"\x89"
BININT, BININT1, BININT2, BINFLOAT = b"J", b"K", b"M", b"G"
SHORT_BINSTRING, BINSTRING = b"U", b"T"


class Py2Pickler:
    """Writes dict/list/tuple/str/int/float/bool/None and numpy arrays as Python 2.7 + numpy 1.x did.

    Text is written as a py2 byte string (latin1), as is each array's raw data: a Python 3 reader
    therefore needs ``encoding='latin1'``. Array data is streamed to the file, never copied whole.
    """

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self._memo: dict[bytes, int] = {}

    def dump(self, obj: Any) -> None:
        self.file.write(PROTO + b"\x02")
        self._save(obj)
        self.file.write(STOP)

    # -- primitives
    def _global(self, module: str, name: str) -> None:
        key = f"{module}\n{name}\n".encode("ascii")
        if key in self._memo:
            i = self._memo[key]
            self.file.write(BINGET + bytes([i]) if i < 256 else LONG_BINGET + struct.pack("<I", i))
            return
        i = len(self._memo)
        self._memo[key] = i
        self.file.write(GLOBAL + key)
        self.file.write(BINPUT + bytes([i]) if i < 256 else LONG_BINPUT + struct.pack("<I", i))

    def _bytes(self, data: bytes | memoryview, n: int | None = None) -> None:
        n = len(data) if n is None else n
        if n < 256:
            self.file.write(SHORT_BINSTRING + bytes([n]))
        else:
            if n >= 2**31:
                raise ValueError(f"py2 pickle strings hold < 2 GiB, got {n} bytes")
            self.file.write(BINSTRING + struct.pack("<i", n))
        self.file.write(data)

    def _int(self, v: int) -> None:
        if 0 <= v < 256:
            self.file.write(BININT1 + bytes([v]))
        elif 0 <= v < 65536:
            self.file.write(BININT2 + struct.pack("<H", v))
        elif -(2**31) <= v < 2**31:
            self.file.write(BININT + struct.pack("<i", v))
        else:
            raise ValueError(f"integer {v} does not fit the py2 int opcodes used here")

    def _save(self, obj: Any) -> None:
        if obj is None:
            self.file.write(NONE)
        elif obj is True or obj is False:
            self.file.write(NEWTRUE if obj else NEWFALSE)
        elif isinstance(obj, (int, np.integer)):
            self._int(int(obj))
        elif isinstance(obj, float):
            self.file.write(BINFLOAT + struct.pack(">d", obj))
        elif isinstance(obj, str):
            self._bytes(obj.encode("latin1"))
        elif isinstance(obj, tuple):
            if len(obj) == 1:
                self._save(obj[0])
                self.file.write(TUPLE1)
            elif len(obj) == 3:
                for v in obj:
                    self._save(v)
                self.file.write(TUPLE3)
            else:
                self.file.write(MARK)
                for v in obj:
                    self._save(v)
                self.file.write(TUPLE)
        elif isinstance(obj, list):
            self.file.write(EMPTY_LIST)
            if obj:
                self.file.write(MARK)
                for v in obj:
                    self._save(v)
                self.file.write(APPENDS)
        elif isinstance(obj, dict):
            self.file.write(EMPTY_DICT)
            if obj:
                self.file.write(MARK)
                for k, v in obj.items():
                    self._save(k)
                    self._save(v)
                self.file.write(SETITEMS)
        elif isinstance(obj, np.ndarray):
            self._array(obj)
        else:
            raise TypeError(f"py2 pickle writer: unsupported type {type(obj).__name__}")

    def _dtype(self, dt: np.dtype) -> None:
        # numpy 1.x: dtype(('f8', 0, 1)) then state (3, '<', None, None, None, -1, -1, 0).
        if dt.kind not in "biuf" or dt.fields is not None:
            raise TypeError(f"py2 pickle writer: unsupported dtype {dt}")
        self._global("numpy", "dtype")
        self._save((f"{dt.kind}{dt.itemsize}", 0, 1))
        self.file.write(REDUCE)
        order = "|" if dt.itemsize == 1 else "<"
        self._save((3, order, None, None, None, -1, -1, 0))
        self.file.write(BUILD)

    def _array(self, a: np.ndarray) -> None:
        # numpy 1.x: _reconstruct(ndarray, (0,), 'b') then state (1, shape, dtype, fortran, raw).
        a = np.ascontiguousarray(a)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        self._global("numpy.core.multiarray", "_reconstruct")
        self._global("numpy", "ndarray")
        self._save((0,))
        self._save("b")
        self.file.write(TUPLE3 + REDUCE)
        self.file.write(MARK)
        self._save(1)
        self._save(tuple(int(d) for d in a.shape))
        self._dtype(a.dtype)
        self._save(False)
        self._bytes(memoryview(a).cast("B"), a.nbytes)
        self.file.write(TUPLE + BUILD)


def dump(obj: Any, file: BinaryIO) -> None:
    """Write ``obj`` to ``file`` as a Python 2 pickle (protocol 2)."""
    Py2Pickler(file).dump(obj)

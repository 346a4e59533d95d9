"""A writer of Python-2-style pickles (protocol 0, Python 2's default, or 2; byte strings as py2 `str`;
numpy 1.x array layout), so generated files need `encoding='latin1'`, like the real WESAD pickles."""

from __future__ import annotations

import struct
from typing import Any, BinaryIO

import numpy as np

from esnfed_core.quote import quote

PROTOCOLS = (0, 2)
# Opcodes (pickletools names). Protocol 0 is text: arguments end with a newline.
PROTO, STOP, MARK = b"\x80", b".", b"("
DICT, EMPTY_DICT, SETITEM, SETITEMS = b"d", b"}", b"s", b"u"
LIST, EMPTY_LIST, APPEND, APPENDS = b"l", b"]", b"a", b"e"
TUPLE, TUPLE1, TUPLE3, REDUCE, BUILD = b"t", b"\x85", b"\x87", b"R", b"b"
GLOBAL, PUT, GET, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET = b"c", b"p", b"g", b"q", b"r", b"h", b"j"
NONE, NEWTRUE, NEWFALSE = b"N", b"\x88", b"\x89"
INT, FLOAT, BININT, BININT1, BININT2, BINFLOAT = b"I", b"F", b"J", b"K", b"M", b"G"
STRING, SHORT_BINSTRING, BINSTRING = b"S", b"U", b"T"

_CHUNK = 1 << 22  # bytes escaped at a time (protocol 0): bounds the temporaries


def _escape_tables(quote: int) -> tuple[np.ndarray, np.ndarray]:
    """Python 2 ``repr(str)`` escapes per byte value: (lengths (256,), bytes padded to (256, 4))."""
    seqs = []
    for b in range(256):
        if b == quote or b == 0x5C:
            s = b"\\" + bytes([b])
        elif b in (0x09, 0x0A, 0x0D):
            s = {0x09: b"\\t", 0x0A: b"\\n", 0x0D: b"\\r"}[b]
        elif 0x20 <= b < 0x7F:
            s = bytes([b])
        else:
            s = b"\\x%02x" % b
        seqs.append(s)
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    table = np.zeros((256, 4), dtype=np.uint8)
    for b, s in enumerate(seqs):
        table[b, : len(s)] = np.frombuffer(s, dtype=np.uint8)
    return lens, table


_TABLES = {q: _escape_tables(q) for q in (0x27, 0x22)}


def _escaped(data: np.ndarray, quote: int) -> bytes:
    """Vectorised py2 repr body of the byte values ``data`` (uint8)."""
    lens, table = _TABLES[quote]
    n = lens[data]
    stop = np.cumsum(n)
    start = stop - n
    out = np.empty(int(stop[-1]) if data.size else 0, dtype=np.uint8)
    for k in range(4):
        m = n > k
        out[start[m] + k] = table[data[m], k]
    return out.tobytes()


class Py2Pickler:
    """Writes dict/list/tuple/str/int/float/bool/None and numpy arrays as Python 2.7 + numpy 1.x did.

    Text is written as a py2 byte string (latin1), as is each array's raw data: a Python 3 reader
    therefore needs ``encoding='latin1'``. Array data is streamed to the file in chunks.
    """

    def __init__(self, file: BinaryIO, protocol: int = 2) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol: expected one of {', '.join(map(str, PROTOCOLS))}, got {quote(protocol)}")
        self.file = file
        self.protocol = protocol
        self._memo: dict[bytes, int] = {}

    def dump(self, obj: Any) -> None:
        if self.protocol >= 2:
            self.file.write(PROTO + bytes([self.protocol]))
        self._save(obj)
        self.file.write(STOP)

    # -- primitives
    def _global(self, module: str, name: str) -> None:
        key = f"{module}\n{name}\n".encode("ascii")
        i = self._memo.get(key)
        if i is not None:
            if self.protocol == 0:
                self.file.write(GET + b"%d\n" % i)
            else:
                self.file.write(BINGET + bytes([i]) if i < 256 else LONG_BINGET + struct.pack("<I", i))
            return
        i = self._memo[key] = len(self._memo)
        self.file.write(GLOBAL + key)
        if self.protocol == 0:
            self.file.write(PUT + b"%d\n" % i)
        else:
            self.file.write(BINPUT + bytes([i]) if i < 256 else LONG_BINPUT + struct.pack("<I", i))

    def _bytes(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        n = view.nbytes
        if self.protocol == 0:
            arr = np.frombuffer(view, dtype=np.uint8)
            # Python 2's repr: single quotes unless the text has ' and no ".
            has_single = bool(np.any(arr == 0x27))
            quote = 0x22 if has_single and not np.any(arr == 0x22) else 0x27
            self.file.write(STRING + bytes([quote]))
            for i in range(0, n, _CHUNK):
                self.file.write(_escaped(arr[i:i + _CHUNK], quote))
            self.file.write(bytes([quote]) + b"\n")
            return
        if n < 256:
            self.file.write(SHORT_BINSTRING + bytes([n]))
        elif n < 2**31:
            self.file.write(BINSTRING + struct.pack("<i", n))
        else:
            raise ValueError(f"py2 pickle strings hold < 2 GiB, got {n} bytes")
        self.file.write(view)

    def _int(self, v: int) -> None:
        if not -(2**31) <= v < 2**31:
            raise ValueError(f"integer {v} does not fit the py2 int opcodes used here")
        if self.protocol == 0:
            self.file.write(INT + b"%d\n" % v)
        elif 0 <= v < 256:
            self.file.write(BININT1 + bytes([v]))
        elif 0 <= v < 65536:
            self.file.write(BININT2 + struct.pack("<H", v))
        else:
            self.file.write(BININT + struct.pack("<i", v))

    def _tuple(self, items: tuple) -> None:
        if self.protocol >= 2 and len(items) in (1, 3):
            for v in items:
                self._save(v)
            self.file.write(TUPLE1 if len(items) == 1 else TUPLE3)
            return
        self.file.write(MARK)
        for v in items:
            self._save(v)
        self.file.write(TUPLE)

    def _save(self, obj: Any) -> None:
        p0 = self.protocol == 0
        if obj is None:
            self.file.write(NONE)
        elif obj is True or obj is False:
            if p0:
                self.file.write(INT + (b"01\n" if obj else b"00\n"))  # py2's bool in protocol 0
            else:
                self.file.write(NEWTRUE if obj else NEWFALSE)
        elif isinstance(obj, (int, np.integer)):
            self._int(int(obj))
        elif isinstance(obj, float):
            self.file.write(FLOAT + repr(obj).encode() + b"\n" if p0 else BINFLOAT + struct.pack(">d", obj))
        elif isinstance(obj, str):
            self._bytes(obj.encode("latin1"))
        elif isinstance(obj, tuple):
            self._tuple(obj)
        elif isinstance(obj, list):
            self.file.write(MARK + LIST if p0 else EMPTY_LIST)
            if p0:
                for v in obj:
                    self._save(v)
                    self.file.write(APPEND)
            elif obj:
                self.file.write(MARK)
                for v in obj:
                    self._save(v)
                self.file.write(APPENDS)
        elif isinstance(obj, dict):
            self.file.write(MARK + DICT if p0 else EMPTY_DICT)
            if p0:
                for k, v in obj.items():
                    self._save(k)
                    self._save(v)
                    self.file.write(SETITEM)
            elif obj:
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
        # numpy 1.x: dtype('f8', 0, 1) then state (3, '<', None, None, None, -1, -1, 0).
        if dt.kind not in "biuf" or dt.fields is not None:
            raise TypeError(f"py2 pickle writer: unsupported dtype {dt}")
        self._global("numpy", "dtype")
        self._tuple((f"{dt.kind}{dt.itemsize}", 0, 1))
        self.file.write(REDUCE)
        self._tuple((3, "|" if dt.itemsize == 1 else "<", None, None, None, -1, -1, 0))
        self.file.write(BUILD)

    def _array(self, a: np.ndarray) -> None:
        # numpy 1.x: _reconstruct(ndarray, (0,), 'b') then state (1, shape, dtype, fortran, raw).
        a = np.ascontiguousarray(a)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        self._global("numpy.core.multiarray", "_reconstruct")
        p0 = self.protocol == 0
        if p0:
            self.file.write(MARK)
        self._global("numpy", "ndarray")
        self._tuple((0,))
        self._save("b")
        self.file.write((TUPLE if p0 else TUPLE3) + REDUCE + MARK)
        self._save(1)
        self._tuple(tuple(int(d) for d in a.shape))
        self._dtype(a.dtype)
        self._save(False)
        self._bytes(a.reshape(-1).view(np.uint8) if a.size else b"")
        self.file.write(TUPLE + BUILD)


def dump(obj: Any, file: BinaryIO, protocol: int = 2) -> None:
    """Write ``obj`` to ``file`` as a Python 2 pickle (protocol 0 or 2)."""
    Py2Pickler(file, protocol).dump(obj)

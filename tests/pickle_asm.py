"""A tiny pickle assembler for tests: hostile pickles are built opcode by opcode, so each test says
exactly which bytes it feeds the reader (nothing stored that could go stale)."""

from __future__ import annotations

import struct


def glob(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def string(data: bytes | str) -> bytes:
    """A Python 2 byte string (read back as latin-1 text, as the WESAD files are)."""
    data = data.encode("latin1") if isinstance(data, str) else data
    return (b"U" + bytes([len(data)]) if len(data) < 256 else b"T" + struct.pack("<i", len(data))) + data


def integer(n: int) -> bytes:
    if -(2**31) <= n < 2**31:
        return b"J" + struct.pack("<i", n)
    body = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(body)]) + body  # LONG1


def tup(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"


NONE, FALSE, TRUE = b"N", b"\x89", b"\x88"


def dtype(name: str = "f8", order: str = "<", state: bytes | None = None) -> bytes:
    """``numpy.dtype(name, 0, 1)`` then BUILD with numpy's version-3 state (or ``state``)."""
    if state is None:
        state = tup(integer(3), string(order), NONE, NONE, NONE, integer(-1), integer(-1), integer(0))
    return glob("numpy", "dtype") + tup(string(name), integer(0), integer(1)) + b"R" + state + b"b"


def array(shape: tuple[int, ...], raw: bytes, dt: bytes | None = None, fortran: bool = False,
          raw_ops: bytes | None = None) -> bytes:
    """numpy's pickling pattern: ``_reconstruct(ndarray, (0,), 'b')`` then BUILD (1, shape, dtype,
    is_fortran, raw); ``raw_ops`` (opcodes, e.g. a memo GET) stand for the data when given."""
    dt = dtype() if dt is None else dt
    head = glob("numpy.core.multiarray", "_reconstruct") + tup(glob("numpy", "ndarray"), tup(integer(0)),
                                                               string("b")) + b"R"
    data = string(raw) if raw_ops is None else raw_ops
    return head + tup(integer(1), tup(*map(integer, shape)), dt, TRUE if fortran else FALSE, data) + b"b"


def put(i: int) -> bytes:
    return b"r" + struct.pack("<I", i)  # LONG_BINPUT


def get(i: int) -> bytes:
    return b"j" + struct.pack("<I", i)  # LONG_BINGET


def pickle2(body: bytes) -> bytes:
    """A whole protocol-2 pickle of ``body``."""
    return b"\x80\x02" + body + b"."


# ---------------------------------------------------------------- the two attacks

def zeroed_flags_object_array() -> bytes:
    """numpy.dtype('O8') with a version-3 state whose flags are 0: numpy then takes the raw bytes
    of the array state as PyObject pointers (0x4141414141414141 here)."""
    state = tup(integer(3), string("|"), NONE, NONE, NONE, integer(-1), integer(-1), integer(0))
    return pickle2(array((2,), b"A" * 16, dt=dtype("O8", state=state)))


def ndarray_call(keyword: bool) -> bytes:
    """numpy.ndarray(shape, dtype, buffer, 0, strides=(0,)): 2e7 rows over 8 bytes of buffer."""
    args = (tup(integer(20_000_000)), dtype(), string(b"\x00" * 8), integer(0))
    if keyword:  # NEWOBJ_EX: cls.__new__(cls, *args, **kwargs)
        kwargs = b"}(" + string("strides") + tup(integer(0)) + b"u"
        return pickle2(glob("numpy", "ndarray") + tup(*args) + kwargs + b"\x92")
    return pickle2(glob("numpy", "ndarray") + tup(*args, tup(integer(0))) + b"R")

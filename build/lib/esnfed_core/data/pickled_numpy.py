"""Pure-Python stand-ins for the numpy globals a pickle names (``numpy.dtype``, ``numpy.ndarray``,
``_reconstruct``, ``scalar``, ``_frombuffer``), used by :mod:`safe_pickle`.

A pickle never reaches numpy's C constructors or ``__setstate__``: the stand-ins only collect what
the file gives (a dtype string and its state; a shape, order flag and raw bytes), and numpy arrays
are built here from validated parts only: a plain numeric dtype (kind b, i, u or f; explicit byte
order; no fields, subarray, object or flags), every dimension >= 0, size x itemsize equal to the
length of the raw bytes read from the file, C or Fortran order, never strides or a foreign buffer.
The array then owns a copy of those bytes. Anything else raises :class:`Refused` naming the part.

This is the pattern of numpy pickles, Python 2 ones (the WESAD files) included::

    _reconstruct(ndarray, (0,), 'b')  then BUILD (1, shape, dtype, is_fortran, raw bytes)
    dtype('f8', 0, 1)                 then BUILD (3, '<', None, None, None, -1, -1, 0)
    scalar(dtype, raw bytes)          numpy scalars
    _frombuffer(buffer, dtype, shape, order)   protocol 5 (the buffer stored in the pickle)
"""

from __future__ import annotations

import contextlib
import math
import pickle
import re
import sys
from contextvars import ContextVar
from typing import Any, Iterator

import numpy as np

from esnfed_core.quote import quote, quote_shape

MAX_DIMS = 32
_DTYPE = re.compile(r"([biuf])([1248])")  # numpy's pickled name of a plain numeric dtype: 'f8', 'u1', ...
_ITEMSIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8)}


class Refused(pickle.UnpicklingError):
    """A part of a numpy object in the pickle that this reader does not build."""


class Exhausted(pickle.UnpicklingError):
    """The pickle would build more data than its load may allocate (see :func:`budget`)."""


_LEFT: ContextVar[list[int] | None] = ContextVar("pickled_numpy_budget", default=None)


@contextlib.contextmanager
def budget(limit: int) -> Iterator[None]:
    """Within the block, arrays built here and :func:`charge`'d results may total ``limit``
    bytes: data reused through the pickle's memo cannot multiply the memory a load takes."""
    token = _LEFT.set([limit])
    try:
        yield
    finally:
        _LEFT.reset(token)


def charge(nbytes: int, what: str) -> None:
    """Count ``nbytes`` about to be allocated for ``what`` against the current budget."""
    left = _LEFT.get()
    if left is None:
        return
    if nbytes > left[0]:
        raise Exhausted(f"{what} would take {nbytes} bytes, {left[0]} are left of the budget")
    left[0] -= nbytes


class DtypeSpec:
    """What ``numpy.dtype(name, align, copy)`` and its BUILD state say; :attr:`dtype` is set once
    the state (which gives the byte order) has been checked."""

    __slots__ = ("name", "dtype")
    __hash__ = None  # type: ignore[assignment]  # never a dict key or set member

    def __new__(cls, name: Any = None, align: Any = False, copy: Any = False, *extra: Any) -> "DtypeSpec":
        text = name.decode("latin1") if isinstance(name, bytes) else name
        m = _DTYPE.fullmatch(text) if isinstance(text, str) else None
        if m is None or int(m.group(2)) not in _ITEMSIZES[m.group(1)]:
            raise Refused(f"dtype {quote(name)} (only bool, integer and float dtypes are read)")
        if extra or any(type(v) not in (bool, int) or v not in (0, 1) for v in (align, copy)):
            raise Refused("dtype with arguments other than (name, align, copy)")
        self = object.__new__(cls)
        self.name = text
        self.dtype = None
        return self

    def set_state(self, state: Any) -> None:
        """numpy's dtype state (3, byteorder, subarray, names, fields, elsize, alignment, flags)
        (version 4 adds metadata): only the plain form of a numeric dtype is admitted."""
        if self.dtype is not None:
            raise Refused(f"dtype {self.name}: state given twice")
        if not isinstance(state, tuple) or len(state) not in (8, 9) or type(state[0]) is not int \
                or state[0] != len(state) - 5:
            raise Refused(f"dtype {self.name}: state {quote(state)} (expected numpy's version 3 or 4 form)")
        order, subarray, names, fields, elsize, alignment, flags = state[1:8]
        if not isinstance(order, str) or order not in ("<", ">", "|") or (order == "|" and self.name[1] != "1"):
            raise Refused(f"dtype {self.name}: byte order {quote(order)} (expected '<' or '>', or '|' "
                          "for one-byte types)")
        if subarray is not None or names is not None or fields is not None:
            raise Refused(f"dtype {self.name}: fields or subarray (structured dtypes are not read)")
        plain = all(type(v) is int for v in (elsize, alignment, flags)) and (elsize, alignment, flags) == (-1, -1, 0)
        if not plain or (len(state) == 9 and state[8] is not None):
            raise Refused(f"dtype {self.name}: size, alignment, flags or metadata "
                          f"{quote(state[5:])} (expected -1, -1, 0)")
        self.dtype = np.dtype(("<" if order == "|" else order) + self.name)  # built from our own string

    def built(self, what: str) -> np.dtype:
        if self.dtype is None:
            raise Refused(f"{what}: dtype {self.name} without its state (no byte order)")
        return self.dtype


class Ndarray:
    """Stands for ``numpy.ndarray``: only passed to ``_reconstruct``; calling it is refused (a
    direct call could take strides and an outside buffer)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "Ndarray":
        raise Refused("numpy.ndarray called directly (only numpy's own pickling pattern is read)")


class ArraySpec:
    """What ``_reconstruct(ndarray, (0,), b'b')`` returns; BUILD then gives the array's parts and
    :attr:`array` is built from them."""

    __slots__ = ("array",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self) -> None:
        self.array = None

    def set_state(self, state: Any) -> None:
        """numpy's array state (1, shape, dtype, is_fortran, raw) (version 0: without the 1); like
        numpy's ``__setstate__``, data of the other byte order ends up in native order."""
        if self.array is not None:
            raise Refused("array state given twice")
        if not isinstance(state, tuple) or len(state) not in (4, 5) or (len(state) == 5 and (
                type(state[0]) is not int or state[0] != 1)):
            raise Refused(f"array state {quote(state)} (expected (1, shape, dtype, is_fortran, data))")
        shape, dtype, fortran, raw = state[-4:]
        if type(fortran) not in (bool, int) or fortran not in (0, 1):
            raise Refused(f"array order flag {quote(fortran)} (expected 0 or 1)")
        array = build_array(shape, dtype, "F" if fortran else "C", raw)
        if not array.dtype.isnative:  # as numpy's __setstate__ does: swapped to native order
            array = array.byteswap(inplace=True).view(array.dtype.newbyteorder("="))
        self.array = array


def reconstruct(subtype: Any, shape: Any, typecode: Any) -> ArraySpec:
    """Stands for ``numpy.core.multiarray._reconstruct``: only ``(ndarray, (0,), b'b')``."""
    if subtype is not Ndarray or type(shape) is not tuple or shape != (0,) or type(typecode) not in (str, bytes) \
            or typecode not in ("b", b"b"):
        raise Refused("_reconstruct with arguments other than (numpy.ndarray, (0,), 'b')")
    return ArraySpec()


def _raw_bytes(raw: Any, what: str) -> bytes | bytearray | memoryview:
    """The data bytes as stored in the pickle: bytes, a bytearray, a read-only view of either
    (protocol 5), or a Python 2 byte string read as latin-1 text."""
    if isinstance(raw, str):
        try:
            return raw.encode("latin1")
        except UnicodeEncodeError:
            raise Refused(f"{what}: data is text, not a byte string") from None
    if isinstance(raw, memoryview) and isinstance(raw.obj, (bytes, bytearray)):
        return raw.cast("B") if raw.c_contiguous else raw.tobytes()
    if isinstance(raw, (bytes, bytearray)):
        return raw
    raise Refused(f"{what}: data is a {type(raw).__name__}, expected bytes (object arrays are not read)")


def build_array(shape: Any, dtype: Any, order: str, raw: Any) -> np.ndarray:
    """A new array of ``shape`` and ``dtype`` (a :class:`DtypeSpec`) in ``order`` ('C' or 'F')
    filled with a copy of ``raw``; every part is checked first."""
    if not isinstance(dtype, DtypeSpec):
        raise Refused(f"array dtype is a {type(dtype).__name__}, expected numpy.dtype")
    dt = dtype.built("array")
    if not isinstance(shape, tuple) or len(shape) > MAX_DIMS or \
            any(type(d) is not int or not 0 <= d <= sys.maxsize for d in shape):
        raise Refused(f"array shape {quote_shape(shape)} (expected up to {MAX_DIMS} dimensions, each an int >= 0)")
    if type(order) is not str or order not in ("C", "F"):
        raise Refused(f"array order {quote(order)} (expected 'C' or 'F')")
    if math.prod(d for d in shape if d) * dt.itemsize > sys.maxsize // 2:
        raise Refused(f"array shape {quote_shape(shape)} of {dt}: too large")
    data = _raw_bytes(raw, "array")
    need = math.prod(shape) * dt.itemsize
    if need != len(data):
        raise Refused(f"array shape {quote_shape(shape)} of {dt} needs {need} bytes, the data holds {len(data)}")
    charge(need, f"array {quote_shape(shape)} of {dt}")
    return np.frombuffer(bytearray(data), dtype=dt).reshape(shape, order=order)


def scalar(dtype: Any, raw: Any = None, *extra: Any) -> np.generic:
    """Stands for ``numpy.core.multiarray.scalar``: a numpy scalar from its raw bytes."""
    if extra:
        raise Refused("scalar with more than (dtype, data)")
    return build_array((), dtype, "C", raw)[()]


def frombuffer(buf: Any, dtype: Any, shape: Any, order: Any, axis_order: Any = None) -> np.ndarray:
    """Stands for ``numpy.core.numeric._frombuffer`` (protocol 5 pickles, the buffer stored in band)."""
    if axis_order is not None or (type(order) is str and order == "K"):  # numpy: neither C- nor F-contiguous
        raise Refused("_frombuffer of a non-contiguous array (axis order)")
    return build_array(shape, dtype, order, buf)


def finish(obj: Any, max_depth: int = 64) -> Any:
    """The loaded object with every stand-in replaced by its numpy object. Containers holding
    one are copied (shared ones once); a stand-in without its state, a structure that contains
    itself, or nesting deeper than ``max_depth`` is refused."""
    done: dict[int, Any] = {}
    active: set[int] = set()

    def walk(o: Any, depth: int) -> Any:
        if isinstance(o, ArraySpec):
            if o.array is None:
                raise Refused("array without its state")
            return o.array
        if isinstance(o, DtypeSpec):
            return o.built("dtype")
        if type(o) not in (list, tuple, dict):
            return o  # str, numbers, sets...: cannot hold a stand-in (stand-ins are unhashable)
        key = id(o)
        if key in done:
            return done[key]
        if key in active:
            raise Refused("a list, tuple or dict that contains itself")
        if depth >= max_depth:
            raise Refused(f"containers nested deeper than {max_depth}")
        active.add(key)
        if type(o) is dict:
            new: Any = {k: walk(v, depth + 1) for k, v in o.items()}
        else:
            items = [walk(v, depth + 1) for v in o]
            new = items if type(o) is list else tuple(items)
        active.discard(key)
        done[key] = new
        return new

    return walk(obj, 0)

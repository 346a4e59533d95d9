"""A restricted unpickler for dataset pickles (the WESAD files): admits only what numpy arrays and
plain containers need, refuses any other global (an import or a call) before it can run, and keeps
memory bounded by the file.

- Globals come from a fixed table, never imported by name. numpy's are pure-Python stand-ins
  (:mod:`pickled_numpy`): arrays are built there from validated parts, so no opcode reaches numpy's
  C constructors or ``__setstate__``. BUILD applies only to those stand-ins.
- It runs on pickle's pure-Python unpickler (its memo is a dict: C's memo is an array sized by the
  largest index a PUT names, a 6-byte opcode can make it gigabytes). Every read that names a
  length is checked against the bytes left in the file before anything is allocated, the number
  of opcodes is capped (each makes O(1) objects), and ``bytes(n)``-style calls are refused, so
  peak memory stays within a few times the file size plus a fixed overhead.
- Every failure is a one-line :class:`DataError` naming the file; input is quoted cut short.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import io
import os
import pickle
import struct
import warnings
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from esnfed_core.data import pickled_numpy as pn
from esnfed_core.data.paths import check_input
from esnfed_core.errors import DataError
from esnfed_core.quote import brief, quote

MAX_OPCODES = 200_000  # real WESAD pickles run a few hundred; each makes O(1) objects
BUDGET_FIXED = 64 << 20  # a load may build 2x the file size plus this (arrays, admitted calls)
_LATIN1 = {"latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1"}


class _Refused(pickle.UnpicklingError):
    """A global or construct outside the allow-list: the pickle would import or call something else."""


class _Truncated(pickle.UnpicklingError):
    """The file ends before the length an opcode names."""


def _latin1_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """Stand-in for codecs.encode: pickles of bytes under protocol < 3 store them as
    `encode(text, 'latin1')`. Only that use is admitted; other codecs (zlib, rot13, ...) are not."""
    if not isinstance(obj, str) or not isinstance(encoding, str) or encoding.lower() not in _LATIN1 \
            or errors != "strict":
        raise _Refused(f"codecs.encode called with codec {quote(encoding)}")
    pn.charge(len(obj), "codecs.encode")
    return obj.encode("latin1")


_NUMPY = (np.ndarray, np.generic, np.dtype, pn.ArraySpec, pn.DtypeSpec)
# builtin -> bytes its result may take per item of its arguments (charged before the call)
_BUILTINS = {dict: 100, set: 100, frozenset: 100, list: 8, tuple: 8, str: 1, bytes: 1, bytearray: 1,
             int: 1, float: 1, complex: 1, bool: 1}


def _admitted(fn: type, per_item: int) -> Any:
    """A builtin as a pickle may call it: on plain values only (``list(array)`` would make an
    object per element), ``bytes``/``bytearray`` not with a size (``bytes(n)`` allocates n bytes),
    text codecs latin-1 only, ``str`` only to decode, and the result charged to the budget."""
    name = fn.__name__

    def call(*args: Any) -> Any:
        if any(isinstance(a, _NUMPY) for a in args):
            raise _Refused(f"{name}() of a numpy object")
        if fn in (bytes, bytearray) and args and hasattr(type(args[0]), "__index__"):
            raise _Refused(f"{name}(<int>) (allocates memory the file does not hold)")
        if fn in (str, bytes, bytearray) and len(args) > 1 and (
                len(args) > 2 or not isinstance(args[1], str) or args[1].lower() not in _LATIN1):
            raise _Refused(f"{name}() with arguments other than (data, 'latin1')")
        if fn is str and args and not (isinstance(args[0], str) or len(args) == 2):
            raise _Refused("str() of anything but text or latin-1 bytes")
        pn.charge(per_item * sum(len(a) for a in args if hasattr(a, "__len__")) + 64, f"{name}()")
        return fn(*args)

    call.__name__ = name
    return call


# (module, name) -> object. Both numpy 1 (numpy.core) and numpy 2 (numpy._core) spellings appear in
# real pickles.
_ALLOWED: dict[tuple[str, str], Any] = {("numpy", "ndarray"): pn.Ndarray, ("numpy", "dtype"): pn.DtypeSpec}
for _mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _ALLOWED[(_mod, "_reconstruct")] = pn.reconstruct
    _ALLOWED[(_mod, "scalar")] = pn.scalar
for _mod in ("numpy.core.numeric", "numpy._core.numeric"):
    _ALLOWED[(_mod, "_frombuffer")] = pn.frombuffer  # protocol-5 numpy pickles
for _mod in ("_codecs", "codecs"):
    _ALLOWED[(_mod, "encode")] = _latin1_encode
for _obj, _per_item in _BUILTINS.items():
    _ALLOWED[("builtins", _obj.__name__)] = _admitted(_obj, _per_item)
del _mod, _obj, _per_item


def _py3_name(module: str, name: str) -> tuple[str, str]:
    """Map Python 2 names (``__builtin__.unicode``) to Python 3 ones, as pickle's fix_imports does."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


class _Bounded:
    """The file as the unpickler reads it: a read longer than what is left fails before it is
    attempted (a length field cannot make the reader allocate more than the file holds)."""

    def __init__(self, file: BinaryIO):
        self.file = file
        start = file.tell()
        self.left = file.seek(0, os.SEEK_END) - start
        file.seek(start)

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > self.left:
            raise _Truncated(f"an opcode names {n} bytes, {self.left} are left")
        data = self.file.read(n)
        self.left -= len(data)
        if len(data) != n:
            raise _Truncated(f"read {len(data)} of {n} bytes")
        return data

    def readline(self) -> bytes:
        line = self.file.readline()
        self.left -= len(line)
        return line


def _dispatch() -> dict[int, Any]:
    """pickle's opcode table with a counter on every opcode and the opcodes that allocate by a
    stored length, or apply state, replaced."""
    table = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def count(fn: Any) -> Any:
        def op(self: "_RestrictedUnpickler") -> None:
            self.ops += 1
            if self.ops > MAX_OPCODES:
                raise _Refused(f"more than {MAX_OPCODES} opcodes")
            fn(self)
        return op

    def load_build(self: "_RestrictedUnpickler") -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) not in (pn.ArraySpec, pn.DtypeSpec):
            raise _Refused(f"setting the state of a {type(inst).__name__} (only numpy arrays and dtypes)")
        inst.set_state(state)

    def load_bytearray8(self: "_RestrictedUnpickler") -> None:
        (n,) = struct.unpack("<Q", self.read(8))
        if n > self.file_size:
            raise _Truncated(f"BYTEARRAY8 names {n} bytes, the file has {self.file_size}")
        self.append(bytearray(self.read(n)))

    def load_string(self: "_RestrictedUnpickler") -> None:
        # pickle's own version copies the (often hundreds of MB) line twice before decoding it
        line = self.readline()
        if len(line) < 3 or line[-1:] != b"\n" or line[:1] != line[-2:-1] or line[:1] not in (b"'", b'"'):
            raise pickle.UnpicklingError("the STRING opcode argument must be quoted")
        with memoryview(line) as view, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # invalid escapes: kept as pickle does
            data = codecs.escape_decode(view[1:-2])[0]
        del line
        self.append(self._decode_string(data))

    for code, fn in table.items():
        table[code] = count(fn)
    table[pickle.BUILD[0]] = count(load_build)
    table[pickle.BYTEARRAY8[0]] = count(load_bytearray8)
    table[pickle.STRING[0]] = count(load_string)
    return table


class _RestrictedUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    dispatch = _dispatch()

    def __init__(self, file: BinaryIO, *, encoding: str):
        bounded = _Bounded(file)
        self.file_size = bounded.left
        self.ops = 0
        super().__init__(bounded, encoding=encoding)

    def find_class(self, module: str, name: str) -> Any:
        key = _py3_name(module, name)
        try:
            return _ALLOWED[key]
        except KeyError:
            raise _Refused(f"pickle global {brief(f'{module}.{name}')}") from None

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused(f"persistent id {quote(pid)}")


def load(file: BinaryIO, *, name: str | Path = "<pickle>", encoding: str = "latin1") -> Any:
    """Unpickle ``file`` (seekable) admitting only numpy arrays/dtypes/scalars and builtin containers.

    ``encoding='latin1'`` reads Python 2 pickles (byte strings such as numpy's raw data) the way
    numpy expects. Any failure becomes a one-line DataError naming ``name``.
    """
    try:
        unpickler = _RestrictedUnpickler(file, encoding=encoding)
        with pn.budget(2 * unpickler.file_size + BUDGET_FIXED):
            return pn.finish(unpickler.load())
    except _Refused as exc:
        raise DataError(f"{name}: refused {brief(exc)} (only numpy arrays and plain containers "
                        "are allowed; the file was not executed)") from None
    except pn.Refused as exc:
        raise DataError(f"{name}: refused numpy object: {brief(exc)}") from None
    except pn.Exhausted as exc:
        raise DataError(f"{name}: refused: the pickle builds more than twice its size in data "
                        f"({brief(exc)})") from None
    except (EOFError, _Truncated) as exc:
        detail = f" ({brief(exc)})" if str(exc) else ""
        raise DataError(f"{name}: truncated pickle (unexpected end of file){detail}") from None
    except MemoryError:
        raise DataError(f"{name}: pickle needs more memory than available") from None
    except RecursionError:
        raise DataError(f"{name}: corrupt pickle (nested too deeply)") from None
    except Exception as exc:  # UnpicklingError, ValueError, TypeError, ...: a corrupt file
        raise DataError(f"{name}: corrupt pickle ({brief(exc)})") from None


def load_path(path: str | Path) -> Any:
    """Open ``path`` and :func:`load` it; a missing or unreadable file is a DataError."""
    path = check_input(path)
    try:
        # A large buffer: real WESAD pickles are ~0.9 GB of mostly long byte strings.
        f = open(path, "rb", buffering=1 << 20)
    except OSError as exc:
        raise DataError(f"{path}: cannot open ({exc.strerror})") from None
    with f:
        return load(f, name=path)


def loads(data: bytes, *, name: str = "<bytes>") -> Any:
    return load(io.BytesIO(data), name=name)

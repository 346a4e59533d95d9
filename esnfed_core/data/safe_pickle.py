"""A restricted unpickler for dataset pickles: admits only what numpy arrays and plain containers
need, and refuses any other global (an import or a call) before it can run."""

from __future__ import annotations

import _compat_pickle
import io
import pickle
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy._core import multiarray as _multiarray
from numpy._core import numeric as _numeric

from esnfed_core.errors import DataError

_LATIN1 = {"latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1"}


def _latin1_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """Stand-in for codecs.encode: pickles of bytes under protocol < 3 store them as
    `encode(text, 'latin1')`. Only that use is admitted; other codecs (zlib, rot13, ...) are not."""
    if not isinstance(obj, str) or not isinstance(encoding, str) or encoding.lower() not in _LATIN1:
        raise pickle.UnpicklingError(f"codecs.encode called with codec {encoding!r}: refused")
    return obj.encode("latin1", errors)


# (module, name) -> object. Objects are taken from this table, never imported by name, so a
# refused global is never even looked up. Both numpy 1 (numpy.core) and numpy 2 (numpy._core)
# spellings appear in real pickles.
_ALLOWED: dict[tuple[str, str], Any] = {}
for _mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _ALLOWED[(_mod, "_reconstruct")] = _multiarray._reconstruct
    _ALLOWED[(_mod, "scalar")] = _multiarray.scalar
for _mod in ("numpy.core.numeric", "numpy._core.numeric"):
    _ALLOWED[(_mod, "_frombuffer")] = _numeric._frombuffer  # protocol-5 numpy pickles
_ALLOWED[("numpy", "ndarray")] = np.ndarray
_ALLOWED[("numpy", "dtype")] = np.dtype
for _mod in ("_codecs", "codecs"):
    _ALLOWED[(_mod, "encode")] = _latin1_encode
for _obj in (dict, list, tuple, str, bytes, bytearray, int, float, complex, bool, set, frozenset):
    _ALLOWED[("builtins", _obj.__name__)] = _obj
del _mod, _obj


def _py3_name(module: str, name: str) -> tuple[str, str]:
    """Map Python 2 names (``__builtin__.unicode``) to Python 3 ones, as pickle's fix_imports does."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


class _Refused(pickle.UnpicklingError):
    """A global outside the allow-list: the pickle would import or call something else."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        key = _py3_name(module, name)
        try:
            return _ALLOWED[key]
        except KeyError:
            raise _Refused(f"{module}.{name}") from None

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused(f"persistent id {pid!r}")


def load(file: BinaryIO, *, name: str | Path = "<pickle>", encoding: str = "latin1") -> Any:
    """Unpickle ``file`` admitting only numpy arrays/dtypes/scalars and builtin containers.

    ``encoding='latin1'`` reads Python 2 pickles (byte strings such as numpy's raw data) the way
    numpy expects. Any failure becomes a one-line DataError naming ``name``.
    """
    try:
        return _RestrictedUnpickler(file, encoding=encoding).load()
    except _Refused as exc:
        raise DataError(f"{name}: refused pickle global {exc} (only numpy arrays and plain "
                        "containers are allowed; the file was not executed)") from None
    except EOFError:
        raise DataError(f"{name}: truncated pickle (unexpected end of file)") from None
    except pickle.UnpicklingError as exc:
        if "truncated" in str(exc):
            raise DataError(f"{name}: truncated pickle ({exc})") from None
        raise DataError(f"{name}: corrupt pickle ({exc})") from None
    except MemoryError:
        raise DataError(f"{name}: pickle needs more memory than available") from None
    except Exception as exc:  # UnpicklingError, ValueError, TypeError, ...: a corrupt file
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{name}: corrupt pickle ({msg})") from None


def load_path(path: str | Path) -> Any:
    """Open ``path`` and :func:`load` it; a missing or unreadable file is a DataError."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        # A large buffer: real WESAD pickles are ~0.9 GB of mostly long byte strings.
        f = open(path, "rb", buffering=1 << 20)
    except OSError as exc:
        raise DataError(f"{path}: cannot open ({exc.strerror})") from None
    with f:
        return load(f, name=path)


def loads(data: bytes, *, name: str = "<bytes>") -> Any:
    return load(io.BytesIO(data), name=name)

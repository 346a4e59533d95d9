"""Hostile pickles that use only the admitted globals: each is a one-line DataError naming the file
and what was refused, never a signal (the crash cases run in a child process), and memory stays
bounded by the file (a pickle that claims a huge array or string does not get it allocated)."""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from esnfed_core.data import py2pickle, safe_pickle, wesad, wesad_synth
from esnfed_core.errors import DataError
from pickle_asm import (FALSE, NONE, array, dtype, get, glob, integer, ndarray_call, pickle2, put, string, tup,
                        zeroed_flags_object_array)

# Loads the file, then reads the first and last element of every array (an object array built
# from raw bytes dereferences them); prints the DataError and exits 3, or prints "loaded".
_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from esnfed_core.data import safe_pickle
    from esnfed_core.errors import DataError
    try:
        obj = safe_pickle.load_path(sys.argv[1])
    except DataError as exc:
        print(exc)
        sys.exit(3)
    def touch(o):
        if isinstance(o, np.ndarray):
            if o.size:
                repr(o.flat[0]), repr(o.flat[o.size - 1])
        elif isinstance(o, dict):
            for v in o.values():
                touch(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                touch(v)
    touch(obj)
    print("loaded")
""")


def _in_child(tmp_path, data: bytes, script: str = _CHILD) -> subprocess.CompletedProcess:
    path = tmp_path / "S2.pkl"
    path.write_bytes(data)
    return subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("data, refused", [
    (zeroed_flags_object_array(), "dtype 'O8'"),
    (ndarray_call(keyword=False), "numpy.ndarray called directly"),
    (ndarray_call(keyword=True), "numpy.ndarray called directly"),
], ids=["object-dtype-zeroed-flags", "ndarray-strides", "ndarray-strides-kwargs"])
def test_crafted_pickles_that_crashed_or_exhausted_memory_are_one_line_errors(tmp_path, data, refused):
    done = _in_child(tmp_path, data)
    assert done.returncode == 3, (done.returncode, done.stdout[-500:], done.stderr[-500:])
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and done.stderr == ""
    assert lines[0].startswith(str(tmp_path / "S2.pkl")) and "refused" in lines[0] and refused in lines[0]


def _state(shape, dt, fortran, raw, version=integer(1)) -> bytes:
    head = glob("numpy.core.multiarray", "_reconstruct") + tup(glob("numpy", "ndarray"), tup(integer(0)),
                                                               string("b")) + b"R"
    return pickle2(head + tup(version, shape, dt, fortran, raw) + b"b")


def _dtype_state(*items: bytes) -> bytes:
    return tup(*items)


_STD = (integer(-1), integer(-1), integer(0))
HOSTILE = {
    # dtypes
    "object dtype": (pickle2(array((1,), b"\x00" * 8, dt=dtype("O8", "|"))), "dtype 'O8'"),
    "unicode dtype": (pickle2(array((1,), b"\x00" * 4, dt=dtype("U1"))), "dtype 'U1'"),
    "void dtype": (pickle2(array((1,), b"\x00" * 8, dt=dtype("V8", "|"))), "dtype 'V8'"),
    "structured (fields)": (pickle.dumps(np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")]), protocol=2), "dtype 'V12'"),
    "fields in a numeric dtype's state": (pickle2(array((1,), b"\x00" * 8, dt=dtype("f8", state=_dtype_state(
        integer(3), string("<"), NONE, tup(string("a")), b"}", *_STD)))), "fields or subarray"),
    "subarray": (pickle2(array((1,), b"\x00" * 8, dt=dtype("f8", state=_dtype_state(
        integer(3), string("<"), tup(dtype(), tup(integer(1))), NONE, NONE, *_STD)))), "fields or subarray"),
    "flags set": (pickle2(array((1,), b"\x00" * 8, dt=dtype("f8", state=_dtype_state(
        integer(3), string("<"), NONE, NONE, NONE, integer(-1), integer(-1), integer(63))))), "flags"),
    "native byte order": (pickle2(array((1,), b"\x00" * 8, dt=dtype("f8", "="))), "byte order '='"),
    "no byte order (no dtype state)": (pickle2(array((1,), b"\x00" * 8, dt=glob("numpy", "dtype") + tup(
        string("f8"), integer(0), integer(1)) + b"R")), "without its state"),
    "dtype state twice": (pickle2(array((1,), b"\x00" * 8, dt=dtype() + tup(
        integer(3), string("<"), NONE, NONE, NONE, *_STD) + b"b")), "state given twice"),
    # shapes and byte counts
    "negative dimension": (pickle2(array((-1, 4), b"\x00" * 32)), "shape (-1, 4)"),
    "huge shape, few bytes": (pickle2(array((10**12,), b"\x00" * 8)), "needs 8000000000000 bytes, the data holds 8"),
    "shape product beyond int64": (pickle2(array((2**32, 2**32, 2), b"")), "too large"),
    "zero-size but huge": (pickle2(array((0, 2**62), b"")), "too large"),
    "too few bytes": (pickle2(array((3,), b"\x00" * 23)), "needs 24 bytes, the data holds 23"),
    "too many bytes": (pickle2(array((3,), b"\x00" * 25)), "needs 24 bytes, the data holds 25"),
    "shape not a tuple": (_state(integer(3), dtype(), FALSE, string(b"\x00" * 24)), "array shape 3"),
    "float dimension": (_state(tup(b"G" + b"@\x08\x00\x00\x00\x00\x00\x00"), dtype(), FALSE, string(b"\x00" * 24)),
                        "array shape (3.0,)"),
    "too many dimensions": (pickle2(array((1,) * 33, b"\x00" * 8)), "up to 32 dimensions"),
    "object data (a list)": (_state(tup(integer(1)), dtype(), FALSE, b"]" + integer(1) + b"a"), "data is a list"),
    "state version 2": (_state(tup(integer(1)), dtype(), FALSE, string(b"\x00" * 8), version=integer(2)),
                        "array state"),
    "order flag 2": (_state(tup(integer(1)), dtype(), integer(2), string(b"\x00" * 8)), "order flag 2"),
    "array without state": (pickle2(glob("numpy.core.multiarray", "_reconstruct") + tup(
        glob("numpy", "ndarray"), tup(integer(0)), string("b")) + b"R"), "array without its state"),
    "_reconstruct of another type": (pickle2(glob("numpy.core.multiarray", "_reconstruct") + tup(
        glob("builtins", "list"), tup(integer(0)), string("b")) + b"R"), "_reconstruct with arguments"),
    "array state twice": (pickle2(array((1,), b"\x00" * 8) + tup(
        integer(1), tup(integer(1)), dtype(), FALSE, string(b"\x00" * 8)) + b"b"), "state given twice"),
    "_frombuffer with an axis order": (pickle2(glob("numpy.core.numeric", "_frombuffer") + tup(
        string(b"\x00" * 16), dtype(), tup(integer(2)), string("K"), tup(integer(0))) + b"R"), "axis order"),
    "scalar of wrong size": (pickle2(glob("numpy.core.multiarray", "scalar") + tup(dtype(), string(b"\x00" * 3))
                                     + b"R"), "needs 8 bytes, the data holds 3"),
    # other constructs
    "BUILD on a list": (pickle2(b"]" + b"}" + b"b"), "setting the state of a list"),
    "BUILD on the stand-in class": (pickle2(glob("numpy", "dtype") + b"}(" + string("name") + string("x") + b"u"
                                            + b"b"), "setting the state of a type"),
    "bytes(n)": (pickle2(glob("__builtin__", "bytes") + tup(integer(10**12)) + b"R"), "bytes(<int>)"),
    "bytearray(n)": (pickle2(glob("__builtin__", "bytearray") + tup(integer(10**12)) + b"R"), "bytearray(<int>)"),
    "list of an array": (pickle2(glob("__builtin__", "list") + tup(array((3,), b"\x00" * 24)) + b"R"),
                         "list() of a numpy object"),
    "bytes of a numpy int": (pickle2(glob("__builtin__", "bytes") + tup(glob("numpy.core.multiarray", "scalar") + tup(
        dtype("i8"), string(b"\x00\x10" * 4)) + b"R") + b"R"), "bytes() of a numpy object"),
    "bytes of a bool": (pickle2(glob("__builtin__", "bytes") + tup(b"\x88") + b"R"), "bytes(<int>)"),
    "str of a list": (pickle2(glob("__builtin__", "str") + tup(b"]") + b"R"), "str() of anything but text"),
    "bytes with utf-32": (pickle2(glob("__builtin__", "bytes") + tup(string("ab"), string("utf-32")) + b"R"),
                          "other than (data, 'latin1')"),
    "recursive list": (pickle2(b"]q\x00h\x00a"), "contains itself"),
    "deep nesting": (pickle2(b"]" * 100 + b"a" * 99), "nested deeper"),
    "long global name": (pickle2(glob("x" * 100_000, "y")), "refused pickle global xxx"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_pickles_are_refused_in_one_short_line(tmp_path, case):
    data, fragment = HOSTILE[case]
    path = tmp_path / "S2.pkl"
    path.write_bytes(data)
    with pytest.raises(DataError) as err:
        safe_pickle.load_path(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg and len(msg) < len(str(path)) + 400, msg
    assert fragment in msg, msg


def test_the_assembler_builds_what_numpy_itself_reads():
    """The crafted pickles above differ from valid ones only where each case says: the same
    assembler's well-formed arrays load, in numpy's reader and in ours, to the same values."""
    raw = np.arange(6, dtype="<f8").tobytes()
    data = pickle2(tup(array((2, 3), raw), array((2, 3), raw, fortran=True), array((3,), b"\x01\x00\x01",
                                                                                      dt=dtype("b1", "|"))))
    ours, ref = safe_pickle.loads(data), pickle.loads(data, encoding="latin1")
    for a, b in zip(ours, ref):
        assert a.dtype == b.dtype and a.shape == b.shape and a.flags.f_contiguous == b.flags.f_contiguous
        assert a.tobytes(order="A") == b.tobytes(order="A") and a.flags.writeable


def test_arrays_own_their_bytes_and_match_numpys_own_reader_for_every_layout_and_protocol():
    arrays = [np.arange(12, dtype=">i4").reshape(3, 4), np.asfortranarray(np.arange(12.0).reshape(3, 4)),
              np.zeros((0, 5), np.float32), np.array(True), np.arange(7, dtype=np.uint16),
              np.linspace(0, 1, 4, dtype=np.float16)]
    for protocol in range(6):
        data = pickle.dumps(arrays, protocol=protocol)
        got, ref = safe_pickle.loads(data), pickle.loads(data)
        for a, b, orig in zip(got, ref, arrays):
            assert a.dtype == b.dtype and a.shape == b.shape and a.flags.f_contiguous == b.flags.f_contiguous
            assert a.tobytes(order="A") == b.tobytes(order="A")
            np.testing.assert_array_equal(a, orig)
            assert a.flags.writeable and not np.shares_memory(a, np.frombuffer(data, np.uint8))


# ---------------------------------------------------------------- memory bounded by the file

_MEASURE = textwrap.dedent("""
    import json, sys, tracemalloc
    from esnfed_core.data import safe_pickle
    from esnfed_core.errors import DataError
    tracemalloc.start()
    try:
        safe_pickle.load_path(sys.argv[1])
        msg = None
    except DataError as exc:
        msg = str(exc)
    print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "error": msg}))
""")

CLAIMS = {
    # an array of 10^8 float64 whose data string claims 800 MB; the file then ends
    "huge array": pickle2(array((10**8,), b""))[:-len(b"U\x00tb.")] + b"T" + (8 * 10**8).to_bytes(4, "little")
    + b"\x00" * 64,
    # a 1 GB byte string that is not there
    "huge string": b"\x80\x02T" + (10**9).to_bytes(4, "little") + b"abc",
    # a memo index of 2e7: C's unpickler sizes its memo array by it (320 MB)
    "huge memo index": b"\x80\x02]r" + (2 * 10**7).to_bytes(4, "little") + b".",
    # a frame of 1 GB that is not there (protocol 4)
    "huge frame": b"\x80\x04\x95" + (10**9).to_bytes(8, "little") + b"N.",
    # bytearray8 of 1 GB (protocol 5)
    "huge bytearray": b"\x80\x05\x96" + (10**9).to_bytes(8, "little") + b"xyz",
}


# Data reused through the memo: one 4 MB string made into 100 arrays (400 MB), or listed 10 times
# (8 bytes per item: 320 MB); a load may build 2x the file size plus 64 MiB.
_RAW = string(b"\x00" * 2**22) + put(0)
REUSE = {
    "arrays from one memo'd string": pickle2(b"(" + array((2**19,), b"", raw_ops=_RAW) + b"".join(
        array((2**19,), b"", raw_ops=get(0)) for _ in range(99)) + b"t"),
    "lists of one memo'd string": pickle2(b"(" + _RAW + b"0" + b"".join(
        glob("__builtin__", "list") + tup(get(0)) + b"R" for _ in range(10)) + b"t"),
}


@pytest.mark.parametrize("case", list(REUSE))
def test_data_reused_through_the_memo_cannot_multiply_memory(tmp_path, case):
    done = _in_child(tmp_path, REUSE[case], _MEASURE)
    assert done.returncode == 0, done.stderr[-800:]
    result = json.loads(done.stdout)
    assert "builds more than twice its size" in result["error"], result
    assert result["peak"] < 2 * len(REUSE[case]) + 80 * 2**20, result


@pytest.mark.parametrize("case", list(CLAIMS))
def test_claimed_sizes_are_not_allocated(tmp_path, case):
    done = _in_child(tmp_path, CLAIMS[case], _MEASURE)
    assert done.returncode == 0, done.stderr[-800:]
    result = json.loads(done.stdout)
    assert result["peak"] < 16 * 2**20, result  # the files are < 100 bytes; the claims 320 MB-1 GB
    if case != "huge memo index":
        assert result["error"] is not None and "truncated pickle" in result["error"]


# ---------------------------------------------------------------- real-format pickles unchanged

@pytest.mark.parametrize("protocol", py2pickle.PROTOCOLS)
def test_real_format_pickles_read_byte_identically_to_numpys_own_reader(protocol):
    rng = np.random.default_rng(3)
    obj = {"signal": {"chest": {"ACC": rng.normal(size=(50, 3)), "Temp": rng.normal(size=(50, 1)).astype(np.float32)},
                      "wrist": {"BVP": rng.normal(size=(7, 1))}},
           "label": rng.integers(0, 8, 50).astype(np.int32), "subject": "S2"}
    buf = io.BytesIO()
    py2pickle.dump(obj, buf, protocol)
    ours = safe_pickle.loads(buf.getvalue())
    ref = pickle.loads(buf.getvalue(), encoding="latin1")

    def same(a, b):
        if isinstance(b, dict):
            assert isinstance(a, dict) and list(a) == list(b)
            for k in b:
                same(a[k], b[k])
        elif isinstance(b, np.ndarray):
            assert type(a) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape
            assert a.flags.c_contiguous == b.flags.c_contiguous and a.tobytes() == b.tobytes()
        else:
            assert type(a) is type(b) and a == b

    same(ours, ref)


@pytest.mark.parametrize("protocol", py2pickle.PROTOCOLS)
@pytest.mark.parametrize("modality, window", [("chest", 700), ("wrist", 8)])
def test_processed_synthetic_wesad_is_the_same_as_with_numpys_own_unpickler(tmp_path, monkeypatch, protocol,
                                                                         modality, window):
    wesad_synth.synthesize_wesad(tmp_path, 7, scale=0.02, subjects=["S2", "S3"], protocol=protocol)
    params = {"subjects": ["S2", "S3"], "modality": modality, "window": window}
    ours = list(wesad.preprocess_wesad(tmp_path, params))

    def standard(path):
        with open(path, "rb") as f:
            return pickle.load(f, encoding="latin1")

    monkeypatch.setattr(wesad.safe_pickle, "load_path", standard)
    ref = list(wesad.preprocess_wesad(tmp_path, params))
    assert [s for s, _, _ in ours] == [s for s, _, _ in ref] == ["S2", "S3"]
    for (_, a, _), (_, b, _) in zip(ours, ref):
        for x, y in ((a.x, b.x), (a.y, b.y), (a.context, b.context)):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()

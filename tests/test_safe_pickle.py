"""The restricted unpickler: numpy arrays and plain containers load from every protocol; anything
that would import or call something else is refused before it runs."""

from __future__ import annotations

import codecs
import io
import os
import pickle

import numpy as np
import pytest

from esnfed_core.data import py2pickle, safe_pickle
from esnfed_core.errors import DataError


def _sample():
    return {
        "f8": np.linspace(-1, 1, 12).reshape(4, 3),
        "f4": np.arange(5, dtype=np.float32)[:, None],
        "i4": np.array([0, 1, 7, -3], dtype=np.int32),
        "u1": np.arange(300, dtype=np.uint8),  # > 255 bytes: the long string opcode
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "scalar": np.float64(2.5),
        "plain": [1, 2.5, "text", b"raw\xff", (1, 2), {3, 4}, frozenset({5}), None, True, 1 + 2j],
    }


def _assert_same(a, b):
    assert set(a) == set(b)
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert b[k].dtype == a[k].dtype and b[k].shape == a[k].shape
            np.testing.assert_array_equal(b[k], a[k])
        else:
            assert b[k] == a[k]


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_numpy_and_containers_load_from_every_protocol(protocol):
    obj = _sample()
    _assert_same(obj, safe_pickle.loads(pickle.dumps(obj, protocol=protocol)))


@pytest.mark.parametrize("protocol", [0, 2])
def test_python2_style_pickle_needs_latin1_and_loads(protocol):
    obj = {"signal": {"chest": {"Temp": np.arange(4, dtype=np.float32)[:, None],
                                "all_bytes": np.arange(256, dtype=np.uint8)}},
           "label": np.array([0, 1, 2], dtype=np.int32), "subject": "S2", "quotes": "it's \"x\" \\",
           "misc": [1, 2.5, None, True, (1, 2), (3,), [], -70000]}
    buf = io.BytesIO()
    py2pickle.dump(obj, buf, protocol)
    data = buf.getvalue()
    assert data[:2] == (b"\x80\x02" if protocol == 2 else b"(d")
    with pytest.raises(UnicodeDecodeError):  # like the real files: ASCII decoding fails
        pickle.loads(data)
    got = safe_pickle.loads(data)
    assert got["subject"] == "S2" and got["quotes"] == obj["quotes"] and got["misc"] == obj["misc"]
    np.testing.assert_array_equal(got["signal"]["chest"]["all_bytes"], obj["signal"]["chest"]["all_bytes"])
    np.testing.assert_array_equal(got["label"], obj["label"])
    assert got["signal"]["chest"]["Temp"].dtype == np.float32
    # The standard unpickler agrees with the restricted one.
    ref = pickle.loads(data, encoding="latin1")
    np.testing.assert_array_equal(ref["signal"]["chest"]["Temp"], got["signal"]["chest"]["Temp"])


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _EvalEvil:
    def __reduce__(self):
        return (eval, ("__import__('os').getcwd()",))


def test_malicious_reduce_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "S2.pkl"
    path.write_bytes(pickle.dumps({"signal": _Evil(marker)}, protocol=2))
    with pytest.raises(DataError) as err:
        safe_pickle.load_path(path)
    msg = str(err.value)
    assert str(path) in msg and "system" in msg and "refused" in msg
    assert "\n" not in msg
    assert not marker.exists()
    # The same file really would run the command with the standard unpickler.
    pickle.loads(path.read_bytes())
    assert marker.exists()


@pytest.mark.parametrize("payload", [
    _EvalEvil(),  # a builtin, but not a container
    getattr,  # builtins.getattr
    np.load,  # a numpy function other than the array reconstructors
])
def test_other_globals_are_refused(payload):
    with pytest.raises(DataError, match="refused pickle global"):
        safe_pickle.loads(pickle.dumps(payload, protocol=2), name="x.pkl")


def test_python2_module_names_are_mapped_before_the_check():
    ok = b"c__builtin__\nset\n(]q\x00(K\x01K\x02etR."  # py2 spelling of set([1, 2])
    assert safe_pickle.loads(ok) == {1, 2}
    bad = b"c__builtin__\neval\n(U\x041+1\x85R."
    with pytest.raises(DataError, match="__builtin__.eval"):
        safe_pickle.loads(bad)


def test_codecs_encode_is_limited_to_latin1():
    assert safe_pickle.loads(pickle.dumps(b"\x00\xff", protocol=2)) == b"\x00\xff"
    glob = pickle.dumps(codecs.encode, protocol=2)[:-1]  # the global alone, then a call
    call = glob + b"X\x01\x00\x00\x00aX\x04\x00\x00\x00zlib\x86R."
    with pytest.raises(DataError, match="codec 'zlib'"):
        safe_pickle.loads(call)


def test_persistent_ids_are_refused():
    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return "ext" if obj == "x" else None

    buf = io.BytesIO()
    P(buf, protocol=2).dump(["x"])
    with pytest.raises(DataError, match="persistent id"):
        safe_pickle.loads(buf.getvalue())


def test_truncated_and_corrupt_files(tmp_path):
    data = pickle.dumps(_sample(), protocol=2)
    cut = tmp_path / "cut.pkl"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="truncated") as err:
        safe_pickle.load_path(cut)
    assert str(cut) in str(err.value)
    junk = tmp_path / "junk.pkl"
    junk.write_bytes(b"this is not a pickle at all")
    with pytest.raises(DataError, match="corrupt pickle") as err:
        safe_pickle.load_path(junk)
    assert str(junk) in str(err.value)
    empty = tmp_path / "empty.pkl"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="truncated"):
        safe_pickle.load_path(empty)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        safe_pickle.load_path(tmp_path / "nope.pkl")

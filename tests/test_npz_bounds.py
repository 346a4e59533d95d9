"""Hostile .npz/.npy files (esnfed_core.data.npz): a header declaring more data than its entry
holds, a deflated entry inflating far beyond the file's size, pickled or truncated entries. Each
is one DataError naming the file, the array and the problem, read with memory bounded by the
file's size (tracemalloc counts numpy's buffers), through every reader that takes an .npz."""

from __future__ import annotations

import io
import os
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from esnfed_core.data import npz
from esnfed_core.data.processed import UserData, load_user, save_user
from esnfed_core.errors import DataError
from esnfed_stages import _io
from esnfed_stages.data.check_data import check_user

_HEADER_LIE = 10**9  # elements an .npy header claims (1 GB of int8): np.load allocates them


def _npy_header(shape: tuple[int, ...], dtype: str) -> bytes:
    d = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, d)
    return buf.getvalue()  # magic string included


def _user(seed: int = 0) -> UserData:
    rng = np.random.default_rng(seed)
    return UserData(rng.standard_normal((4, 5, 3)).astype(np.float32), rng.integers(0, 2, (4, 5)).astype(np.int8),
                    np.array([0, 0, 1, 1], np.int8))


def _with_member(path: Path, name: str, payload: bytes, *, deflate: bool = False, **arrays) -> None:
    """An .npz of ``arrays`` (stored, as np.savez writes) plus the raw entry ``name``.npy."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for k, a in arrays.items():
            with z.open(f"{k}.npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(a))
        method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
        z.writestr(zipfile.ZipInfo(f"{name}.npy"), payload, compress_type=method)


def _bomb(path: Path, name: str, n_bytes: int, **arrays) -> None:
    """``name``.npy: an honest header for ``n_bytes`` int8 zeros, deflated (about 1000:1),
    written in blocks so the test itself never holds the inflated bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for k, a in arrays.items():
            with z.open(f"{k}.npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(a))
        info = zipfile.ZipInfo(f"{name}.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            f.write(_npy_header((n_bytes,), "i1"))
            block = bytes(1 << 20)
            for _ in range(n_bytes >> 20):
                f.write(block)


def _peak(fn) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        fn()
        err = None
    except DataError as exc:
        err = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return err, peak


@pytest.mark.parametrize("lazy", [True, False])
def test_a_header_declaring_a_billion_labels_is_refused_without_allocating_them(tmp_path, lazy):
    d = _user()
    _with_member(tmp_path / "u.npz", "y", _npy_header((_HEADER_LIE,), "i1") + d.y.tobytes(), x=d.x, context=d.context)
    err, peak = _peak(lambda: load_user(tmp_path, "u", lazy=lazy))
    assert err is not None and peak < 8 << 20, peak
    assert str(err) == (f"{tmp_path / 'u.npz'}: array 'y': its .npy header declares {_HEADER_LIE} bytes of "
                        f"data, the entry holds {d.y.size}")


def test_a_deflate_bomb_is_refused_before_inflating(tmp_path):
    d = _user()
    path = tmp_path / "u.npz"
    _bomb(path, "y", 256 << 20, x=d.x, context=d.context)  # 256 MiB from about 256 KB
    assert path.stat().st_size < 1 << 20
    err, peak = _peak(lambda: load_user(tmp_path, "u", lazy=True))
    assert err is not None and peak < 8 << 20, peak
    assert f"u.npz: array 'y' inflates to {(256 << 20) + 128} bytes, beyond 64 times the file's" in str(err)
    assert "\n" not in str(err)


def test_a_bomb_in_a_model_or_a_checked_folder_is_refused_too(tmp_path):
    _bomb(tmp_path / "m.npz", "w_out", 256 << 20)
    err, peak = _peak(lambda: _io.read_npz(tmp_path / "m.npz"))
    assert err is not None and "m.npz: array 'w_out' inflates to" in str(err) and peak < 8 << 20
    folder = tmp_path / "p"
    folder.mkdir()
    d = _user()
    _bomb(folder / "u.npz", "y", 256 << 20, x=d.x, context=d.context)
    problems, peak = [], 0
    tracemalloc.start()
    try:
        problems = check_user(folder, "u", {}, {})
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert problems[0].startswith(f"{folder / 'u.npz'}: array 'y' inflates to") and peak < 8 << 20, (problems, peak)


def test_an_honest_compressed_file_reads_as_np_load_does(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {"a": rng.standard_normal((30, 7)), "b": np.repeat(np.arange(3, dtype=np.int64), 1000),
              "s": np.array(["walk", "sit"]), "f": np.asfortranarray(rng.standard_normal((4, 6)).astype(">f4")),
              "e": np.zeros((0, 3), np.int8), "z": np.float64(2.5)}
    np.savez_compressed(tmp_path / "c.npz", **arrays)
    np.savez(tmp_path / "s.npz", **arrays)
    for name in ("c.npz", "s.npz"):
        got = npz.read_npz(tmp_path / name)
        with np.load(tmp_path / name, allow_pickle=False) as z:
            assert list(got) == z.files
            for k in z.files:
                assert got[k].dtype == z[k].dtype and got[k].shape == z[k].shape
                np.testing.assert_array_equal(got[k], z[k])
    assert list(npz.read_npz(tmp_path / "s.npz", ["b", "nope", "a"])) == ["b", "a"]


@pytest.mark.parametrize("case, fragment", [
    ("pickled", "array 'y' holds Python objects (dtype object); pickled arrays are never loaded"),
    ("short", "array 'y': its .npy header declares 20 bytes of data, the entry holds 19"),
    ("long", "array 'y': its .npy header declares 20 bytes of data, the entry holds 21"),
    ("negative", "array 'y' has shape (-1, 5) in its .npy header (dimensions must be integers >= 0)"),
    ("version", "array 'y' has .npy format (9, 0), expected 1.0 or 2.0"),
    ("bzip2", "array 'y' uses zip compression method 12; only stored or deflated entries are read"),
    ("crc", "cannot read as .npz (Bad CRC-32 for file 'y.npy')"),
    ("truncated", "cannot read as .npz ("),
])
def test_bad_entries_are_one_line_naming_the_file_and_array(tmp_path, case, fragment):
    d = _user()
    path = tmp_path / "u.npz"
    body = d.y.tobytes()
    if case == "pickled":
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        _with_member(path, "y", buf.getvalue(), x=d.x, context=d.context)
    elif case == "short":
        _with_member(path, "y", _npy_header((4, 5), "i1") + body[:-1], x=d.x, context=d.context)
    elif case == "long":
        _with_member(path, "y", _npy_header((4, 5), "i1") + body + b"\0", x=d.x, context=d.context)
    elif case == "negative":
        _with_member(path, "y", _npy_header((4, 5), "i1").replace(b"(4, 5)", b"(-1, 5)") + body,
                     x=d.x, context=d.context)
    elif case == "version":
        _with_member(path, "y", b"\x93NUMPY\x09\x00" + _npy_header((4, 5), "i1")[8:] + body, x=d.x, context=d.context)
    elif case == "bzip2":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as z:
            z.writestr("y.npy", _npy_header((4, 5), "i1") + body)
    elif case == "crc":
        save_user(path, d)
        raw = bytearray(path.read_bytes())
        i = raw.index(body)
        raw[i] ^= 1
        path.write_bytes(bytes(raw))
    elif case == "truncated":
        save_user(path, d)
        path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(DataError) as info:
        npz.read_npz(path, ["y"])
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and fragment in msg and "\n" not in msg, msg


def test_a_folder_or_a_missing_file_is_named(tmp_path):
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(DataError, match=r"d\.npz: is a directory, expected a file$"):
        npz.read_npz(tmp_path / "d.npz")
    os.mkfifo(tmp_path / "p.npz")  # stat'ed, never opened (that would block)
    with pytest.raises(DataError, match=r"p\.npz: is not a regular file: a named pipe \(FIFO\)$"):
        npz.read_npz(tmp_path / "p.npz")
    with pytest.raises(DataError, match=r"n\.npy: file not found$"):
        npz.read_npy(tmp_path / "n.npy")


def test_read_npy_checks_the_header_against_the_file(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "a.npy", a)
    np.testing.assert_array_equal(npz.read_npy(tmp_path / "a.npy"), a)
    (tmp_path / "b.npy").write_bytes(_npy_header((_HEADER_LIE, 4), "f4") + a.tobytes())
    err, peak = _peak(lambda: npz.read_npy(tmp_path / "b.npy"))
    assert err is not None and peak < 8 << 20
    assert str(err).endswith(f"b.npy: array 'b': its .npy header declares {_HEADER_LIE * 16} bytes of data, "
                             "the entry holds 48")


def test_the_deflate_budget_counts_the_whole_file(tmp_path):
    """A well-compressed label column beside ordinary data reads (the budget is per file)."""
    labels = np.repeat(np.arange(4, dtype=np.int64), 250_000)  # 8 MB, deflates to about 10 KB
    np.savez_compressed(tmp_path / "ok.npz", label=labels)
    assert (tmp_path / "ok.npz").stat().st_size * npz.MAX_EXPANSION < labels.nbytes
    np.testing.assert_array_equal(npz.read_npz(tmp_path / "ok.npz")["label"], labels)

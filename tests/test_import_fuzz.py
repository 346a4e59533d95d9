"""Fuzzing `esnfed import` with malformed CSV and .npz inputs (hypothesis): whatever the bytes, a
failure is exit 1 (or 2) with one line of at most 300 characters on stderr, no traceback, no
temporary path, and the earlier output of the dataset untouched; an input that happens to be
valid imports into a folder that passes check-data."""

from __future__ import annotations

import hashlib
import io
import itertools
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_stages.data.check_data import check_folder

VALID = ("user,time,label,ctx,a,b\n"
         + "".join(f"u{u},{t},{'ab'[(t // 2) % 2]},{'s1' if t < 4 else 's2'},{t * 0.5 + u},{-t}\n"
                   for u in range(2) for t in range(8))).encode()
ARGS = ["--dataset", "mine", "--features", "a,b", "--context", "ctx", "--window", "2"]
_counter = itertools.count()


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """An output root holding an earlier, valid import of the dataset."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "valid.csv").write_bytes(VALID)
    _baseline(root)
    return root


def _baseline(root: Path) -> None:
    res = CliRunner().invoke(app, ["import", str(root / "valid.csv"), *ARGS, "--out", str(root / "out")])
    assert res.exit_code == 0, res.output


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _check(root: Path, data: bytes, suffix: str, extra: tuple[str, ...] = ()) -> None:
    src = root / f"in{next(_counter)}{suffix}"
    src.write_bytes(data)
    before = _snapshot(root / "out" / "mine")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas' DtypeWarning and the like: not the CLI's output
        res = CliRunner().invoke(app, ["import", str(src), *ARGS, *extra, "--out", str(root / "out")],
                                 env={"COLUMNS": "80"})
    src.unlink()
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    temporaries = [p.name for p in (root / "out").iterdir() if p.name.endswith(".tmp")]
    assert temporaries == []
    if res.exit_code == 0:  # the mutation left a valid table: it replaced the output, which must conform
        assert check_folder(root / "out" / "mine") == []
        _baseline(root)
        return
    assert res.exit_code in (1, 2)
    lines = res.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) <= 300, res.stderr[:1000]
    assert "Traceback" not in res.output and ".tmp" not in res.stderr, res.stderr
    assert _snapshot(root / "out" / "mine") == before


# Pieces a broken CSV is made of: delimiters, quotes, line ends, numbers at the edges of float64
# and float32, non-UTF-8 bytes, a NUL, long runs.
PIECES = st.sampled_from([b",", b";", b"\t", b'"', b'""', b"\n", b"\r\n", b"\r", b"", b"nan", b"inf", b"-inf",
                          b"1e300", b"1e39", b"-0", b"1e-320", b"\xff\xfe", b"\x00", b"x" * 20_000, b"u" * 100,
                          b"u1", b"a", b"s1", b"label", b"user", b"time", b"0,0,a,s1,1,1\n", b"\xc3\xa9"])


@st.composite
def broken_csv(draw) -> bytes:
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "truncate", "replace"]))
        if kind == "insert":
            data[at:at] = draw(PIECES) * draw(st.integers(1, 3))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 30))]
        elif kind == "truncate":
            del data[at:]
        else:
            data[at:at + 1] = draw(st.binary(min_size=1, max_size=3))
    return bytes(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=broken_csv(), rate=st.sampled_from([(), ("--rate", "1e-300"), ("--rate", "50"),
                                                ("--max-gap", "1e-300")]))
def test_a_broken_csv_fails_in_one_line(root, data, rate):
    _check(root, data, ".csv", rate)


COLUMNS = ["user", "time", "label", "ctx", "a", "b"]
ARRAYS = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=6).map(lambda v: np.array(v, np.float64)),
    st.lists(st.integers(-2 ** 63, 2 ** 63 - 1), max_size=6).map(lambda v: np.array(v, np.int64)),
    st.lists(st.text(max_size=5), max_size=6).map(lambda v: np.array(v, dtype="U5")),
    st.lists(st.booleans(), max_size=6).map(np.array),
    st.just(np.zeros((2, 3))), st.just(np.array([1 + 2j, 3j])), st.just(np.array(["2020-01-01"], "M8[D]")),
    st.just(np.array([{"pickled": 1}], dtype=object)), st.just(np.float64(1.0)),
)


@st.composite
def broken_npz(draw) -> bytes:
    names = draw(st.lists(st.sampled_from(COLUMNS + ["extra"]), unique=True, min_size=3, max_size=7))
    arrays = {n: draw(ARRAYS) for n in names}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    if draw(st.booleans()):  # a file cut short, or a byte changed
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] if draw(st.booleans()) else data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
    return data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=broken_npz())
def test_a_broken_npz_fails_in_one_line(root, data):
    _check(root, data, ".npz")

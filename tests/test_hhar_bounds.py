"""The HHAR reader is bounded: an endless line or field fails at once, naming the line, without
filling memory, and every error message quotes at most about 200 characters of the input. The
crafted files are built here (the zip in the UCI layout, written in pieces)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from esnfed_core.data import hhar, hhar_csv, hhar_source
from esnfed_core.errors import DataError

HEADER = b"Index,Arrival_Time,Creation_Time,x,y,z,User,Model,Device,gt\n"
ROW = b"0,1000,1000,1.0,2.0,3.0,a,nexus4,nexus4_1,stand\n"
CSV = f"{hhar_source.FOLDER}/Phones_accelerometer.csv"


def _uci_zip(root: Path, pieces) -> Path:
    """``root/HHAR/<outer zip>`` holding the inner zip whose accelerometer CSV is ``pieces``
    (bytes, written one after the other: a huge CSV never sits in memory)."""
    inner = root / "inner.zip"
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as z, z.open(CSV, "w", force_zip64=True) as f:
        for piece in pieces:
            f.write(piece)
    (root / "HHAR").mkdir(parents=True)
    outer = root / "HHAR" / hhar_source.OUTER_ZIP
    with zipfile.ZipFile(outer, "w", zipfile.ZIP_STORED) as z:
        z.write(inner, hhar_source.INNER_ZIP)
    inner.unlink()
    return outer


def _endless_field(mb: int):
    yield HEADER + ROW + b"1,1005,1005,"
    for _ in range(mb):
        yield b"1" * 2**20
    yield b",2.0,3.0,a,nexus4,nexus4_1,stand\n" + ROW


_CHILD = textwrap.dedent("""
    import json, resource, sys
    from esnfed_core.data import hhar
    from esnfed_core.errors import DataError
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        list(hhar.preprocess_hhar(sys.argv[1], {"devices": ["nexus4"]}))
        msg = None
    except DataError as exc:
        msg = str(exc)
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    print(json.dumps({"error": msg, "grew": grew}))
""")


def test_an_endless_field_in_the_uci_zip_fails_at_once_without_filling_memory(tmp_path):
    outer = _uci_zip(tmp_path, _endless_field(mb=200))
    assert outer.stat().st_size < 400_000  # 200 MB of CSV text
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-800:]
    result = json.loads(done.stdout)
    assert result["error"] == (f"{outer}:{hhar_source.INNER_ZIP}:{CSV}: line 3 is longer than {hhar_csv.MAX_LINE} bytes "
                               "(HHAR lines have about 100): not an HHAR CSV, or a damaged one")
    assert result["grew"] < 48 * 2**20, result  # the parser never held the 200 MB field


def _error(root: Path) -> str:
    with pytest.raises(DataError) as err:
        list(hhar.preprocess_hhar(root, {"devices": ["nexus4"]}))
    return str(err.value)


def test_a_quoted_field_spanning_many_lines_is_not_joined_into_one_value(tmp_path):
    # pandas' default quoting would read the 2 MB between the quotes as one value and quote it all
    _uci_zip(tmp_path, [HEADER, ROW, b'1,1005,1005,"', b"1\n" * 2**20, b'",2.0,3.0,a,nexus4,nexus4_1,stand\n'])
    msg = _error(tmp_path)
    assert "\n" not in msg and len(msg) < 400 and f"{CSV}: line " in msg, msg[:1000]


@pytest.mark.parametrize("column, value, what", [
    ("x", b"9" * 150 + b"x" * 150, "is not a number"),
    ("Arrival_Time", b"7" * 300 + b"x", "is not an integer"),
    ("gt", b"walk" * 100, "unknown activity"),
])
def test_bad_values_are_quoted_cut_short(tmp_path, column, value, what):
    folder = tmp_path / "HHAR" / hhar_source.FOLDER
    folder.mkdir(parents=True)
    cells = ROW.rstrip(b"\n").split(b",")
    cells[HEADER.rstrip(b"\n").split(b",").index(column.encode())] = value
    (folder / "Phones_accelerometer.csv").write_bytes(HEADER + ROW + b",".join(cells) + b"\n")
    (folder / "Phones_gyroscope.csv").write_bytes(HEADER + ROW)
    msg = _error(tmp_path)
    assert msg.startswith(str(folder / "Phones_accelerometer.csv")) and what in msg and "\n" not in msg
    assert value.decode()[:150] in msg and value.decode() not in msg and f"({len(value)} in all)" in msg


def test_an_endless_header_is_refused(tmp_path):
    folder = tmp_path / "HHAR" / hhar_source.FOLDER
    folder.mkdir(parents=True)
    (folder / "Phones_accelerometer.csv").write_bytes(HEADER.rstrip(b"\n") + b",pad" * 30_000 + b"\n" + ROW)
    msg = _error(tmp_path)
    assert msg == f"{folder / 'Phones_accelerometer.csv'}: header line longer than {hhar_csv.MAX_HEADER} bytes (not an HHAR CSV?)"


@pytest.mark.parametrize("read_size", [1, 7, 64, 4096])
@pytest.mark.parametrize("lengths, bad_line", [
    ([10, hhar_csv.MAX_LINE, 3, hhar_csv.MAX_LINE], None),  # at the bound: fine
    ([10, hhar_csv.MAX_LINE + 1, 3], 6),  # line numbers start at 5 here
    ([hhar_csv.MAX_LINE + 1], 5),
    ([1, 2, 3, 4, 5 * hhar_csv.MAX_LINE], 9),  # the last line, with no newline at the end
])
def test_the_line_bound_holds_across_read_boundaries(read_size, lengths, bad_line):
    text = b"\n".join(b"x" * n for n in lengths)
    raw = hhar_csv._LineBounded(io.BytesIO(text), "f.csv", first_line=5)
    got = bytearray()

    def drain():
        buf = bytearray(read_size)
        while n := raw.readinto(buf):
            got.extend(buf[:n])

    if bad_line is None:
        drain()
        assert bytes(got) == text
    else:
        with pytest.raises(DataError, match=rf"^f\.csv: line {bad_line} is longer than {hhar_csv.MAX_LINE} bytes"):
            drain()

"""JSON files as untrusted text (esnfed_core.data.jsonfile, behind _io.read_json, the manifest and
check-data): nesting past the recursion limit and integers past Python's digit limit are one line
naming the file, like malformed JSON (before: a RecursionError traceback; a ValueError naming no file)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.data.jsonfile import read_json
from esnfed_core.data.processed import load_manifest
from esnfed_core.errors import DataError
from esnfed_stages import _io
from esnfed_stages.data.check_data import check_folder

CASES = [
    ("[" * 100_000, "not valid JSON (nested too deeply)"),
    ('{"a": ' * 100_000, "not valid JSON (nested too deeply)"),
    ('{"units": ' + "9" * 5000 + "}", "not valid JSON (Exceeds the limit (4300 digits) for integer string conversion"),
    (b"\xff\xfe{}", "not valid JSON ('utf-8' codec can't decode byte 0xff"),
    ('{"a": 1', "not valid JSON (Expecting ',' delimiter"),
]


@pytest.mark.parametrize("text, problem", CASES)
def test_every_reader_names_the_file_and_the_problem(tmp_path, text, problem):
    path = tmp_path / "manifest.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for read in (read_json, _io.read_json, lambda p: load_manifest(p.parent)):
        with pytest.raises(DataError) as info:
            read(path)
        assert str(info.value).startswith(f"{path}: {problem}"), str(info.value)
    assert check_folder(tmp_path)[0].startswith(f"{path}: {problem}")


def test_a_missing_file_keeps_each_readers_hint(tmp_path):
    with pytest.raises(DataError, match=r"x\.json: file not found$"):
        _io.read_json(tmp_path / "x.json")
    with pytest.raises(DataError, match=r"manifest\.json: manifest not found \(run `esnfed preprocess` first\)$"):
        load_manifest(tmp_path)
    # leftovers of the input audit: a folder or a FIFO there is named as what it is, not "not found"
    (tmp_path / "manifest.json").mkdir()  # a folder where the file is expected
    with pytest.raises(DataError, match=r"manifest\.json: is a directory, expected a file$"):
        load_manifest(tmp_path)
    os.mkfifo(tmp_path / "x.json")  # never opened: reading a FIFO would block until a writer comes
    with pytest.raises(DataError, match=r"x\.json: is not a regular file: a named pipe \(FIFO\)$"):
        _io.read_json(tmp_path / "x.json")


def test_the_cli_prints_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "manifest.json").write_text("[" * 100_000)
    result = CliRunner().invoke(app, ["check-data", "d"])
    assert result.exit_code == 1
    assert "d/manifest.json: not valid JSON (nested too deeply)" in result.output + result.stderr
    assert "Traceback" not in result.output + result.stderr

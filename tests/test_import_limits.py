"""esnfed import under hostile or huge input: bounds checked as the input is read (classes,
contexts, users, header columns, user-id and field length), every failure one short line naming
the file (no traceback, no temporary path, numbers at a sensible precision), options refused in
one line, no temporary folder left by a SIGTERM or (after the next run) a SIGKILL, and a spill
whose cost does not grow with users times rows."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.errors import DataError
from esnfed_stages.data import import_data, import_readers
from esnfed_stages.data.check_data import check_folder
from esnfed_stages.data.import_data import run
from esnfed_stages.params.imports import import_params

ROOT = Path(__file__).resolve().parents[1]
LINE = 300  # the most characters an error line may have
# The limits docs/data-contract.md states (the module's names for them are checked to match)
MAX_CODES, MAX_USER_CHARS = 127, 64


def test_the_documented_limits_are_the_code_s():
    text = (ROOT / "docs" / "data-contract.md").read_text()
    for name in ("MAX_CODES", "MAX_USERS", "MAX_USER_CHARS", "MAX_COLUMNS", "MAX_HEADER_BYTES", "MAX_FIELD_CHARS"):
        assert f"`{name}`" in text, name
    assert (import_data.MAX_CODES, import_data.MAX_USER_CHARS) == (MAX_CODES, MAX_USER_CHARS)


def _params(src, **kw):
    base = {"source": str(src), "features": ["a"], "window": 1}
    base.update(kw)
    return import_params(base, "imports.mine")


def _csv(path: Path, rows: list[tuple]) -> Path:
    path.write_text("user,time,label,a\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def _many_users(path: Path, users: int) -> Path:
    """``users`` users of two rows each, two classes."""
    with open(path, "w") as f:
        f.write("user,time,label,a\n")
        for u in range(users):
            f.write(f"u{u},0,{'ab'[u % 2]},{u % 7}\nu{u},1,{'ab'[(u + 1) % 2]},{u % 5}\n")
    return path


def _one_line(text: str) -> str:
    """The error line of a failed command's stderr: exactly one, short, without internals."""
    lines = text.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("error: "), text[:2000]
    assert len(lines[0]) <= LINE, lines[0]
    assert "Traceback" not in text and ".tmp" not in text, text
    return lines[0]


def _cli(tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["import", *args, "--dataset", "mine", "--out", str(tmp_path / "out")],
                              env={"COLUMNS": "80"})


def _subprocess_cli(args: list[str], cwd: Path, memory: int | None = None, **kw) -> subprocess.Popen:
    def limit():  # in the child: an address-space cap makes a memory blow-up fail fast instead of swapping
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    return subprocess.Popen([sys.executable, "-m", "esnfed_cli", *args], cwd=cwd, env=env, preexec_fn=limit,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


# ---------------------------------------------------------------- a. bounds checked as read
@pytest.mark.parametrize("column", ["label", "context"])
def test_more_classes_or_contexts_than_int8_holds_are_refused_at_the_row_that_crosses(tmp_path, column):
    """Before: every distinct value was coded and spilled first (1,000,000 labels ran past 120 s
    at 619 MB), and the count was refused at the end without a row."""
    n = MAX_CODES + 20
    with open(tmp_path / "r.csv", "w") as f:
        f.write("user,time,label,ctx,a\n")
        for i in range(n):
            f.write(f"u1,{i},{'c' + str(i) if column == 'label' else 'ab'[i % 2]},"
                    f"{'k' + str(i) if column == 'context' else 'k'},1\n")
    kw = {"context": "ctx"}
    with pytest.raises(DataError) as err:
        run("mine", _params(tmp_path / "r.csv", **kw), out_root=tmp_path / "out")
    what = "classes" if column == "label" else "contexts"
    col = "label" if column == "label" else "ctx"
    assert str(err.value).startswith(f"{tmp_path / 'r.csv'}: row {MAX_CODES + 1} (line {MAX_CODES + 2}), "
                                     f"column '{col}': ")
    assert f"stores {what} as int8 (at most {MAX_CODES})" in str(err.value)
    assert not (tmp_path / "out" / "mine").exists()


def test_a_long_user_id_is_refused_before_it_reaches_the_file_system(tmp_path):
    """Before: a 300-character id became a file name, and the OSError named the temporary path."""
    long_id = "u" * 300
    _csv(tmp_path / "r.csv", [("u1", 0, "a", 1), (long_id, 0, "b", 1), (long_id, 1, "a", 2)])
    res = _cli(tmp_path, str(tmp_path / "r.csv"), "--features", "a", "--window", "1")
    assert res.exit_code == 1
    line = _one_line(res.stderr)
    assert line == (f"error: {tmp_path / 'r.csv'}: row 2 (line 3), column 'user': a user id of 300 characters "
                    f"(at most {MAX_USER_CHARS}: it becomes a file name)")
    assert not (tmp_path / "out" / "mine").exists()


def test_users_beyond_the_bound_are_refused_at_the_first_one_past_it(tmp_path, monkeypatch):
    monkeypatch.setattr(import_data, "MAX_USERS", 3)
    _many_users(tmp_path / "r.csv", 5)
    with pytest.raises(DataError, match=r"r\.csv: row 7 \(line 8\), column 'user': user 'u3' is user 4: at most 3 "
                       r"users are imported"):
        run("mine", _params(tmp_path / "r.csv", chunk_rows=2), out_root=tmp_path / "out")
    assert not (tmp_path / "out" / "mine").exists()


def test_a_field_over_the_bound_is_one_line_naming_row_and_column(tmp_path):
    """Before: the error path re-read the row with Python's csv module, whose field limit
    (128 KiB) ended in a traceback (a 200 MiB line without a newline: 106 lines)."""
    (tmp_path / "r.csv").write_text("user,time,label,a\nu1,0,a,1\n" + "x" * 300_000)
    res = _cli(tmp_path, str(tmp_path / "r.csv"), "--features", "a", "--window", "1")
    assert res.exit_code == 1, res.output
    line = _one_line(res.stderr)
    assert line.startswith(f"error: {tmp_path / 'r.csv'}: row 2 (line 3), column 'user': a field of 300000 "
                           "characters, over 10000"), line


def test_a_header_of_a_million_columns_is_refused_in_bounded_memory_naming_the_file(tmp_path):
    """Before: an 8 MB header of a million columns, five of them used, drove memory to 2.5 GB
    until the address-space cap stopped it, and the error did not name the file."""
    names = ["user", "time", "label", "a"] + [f"c{i}" for i in range(1_000_000)]
    (tmp_path / "wide.csv").write_text(",".join(names) + "\n" + ",".join(["u1", "0", "a", "1"] + [""] * 1_000_000)
                                       + "\n")
    proc = _subprocess_cli(["import", "wide.csv", "--dataset", "mine", "--features", "a", "--window", "1",
                            "--out", "out"], tmp_path, memory=1 << 30)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-2000:]
    line = _one_line(err)
    assert line.startswith(f"error: wide.csv: the header (line 1) is longer than {1 << 20} bytes"), line
    assert not (tmp_path / "out" / "mine").exists()


def test_a_wide_header_reads_fewer_rows_per_chunk(tmp_path, monkeypatch):
    """Memory follows the cells read, not chunk_rows times the columns a header declares."""
    monkeypatch.setattr(import_readers, "CHUNK_CELLS", 40)
    names = ["user", "time", "label", "a"] + [f"c{i}" for i in range(6)]  # 10 columns: 4 rows a chunk
    with open(tmp_path / "r.csv", "w") as f:
        f.write(",".join(names) + "\n")
        for i in range(10):
            f.write(f"u1,{i},{'ab'[i % 2]},{i}" + ",x" * 6 + "\n")
    firsts = [c.first for c in import_readers._csv_chunks(tmp_path / "r.csv", _params(tmp_path / "r.csv"))]
    assert firsts == [1, 5, 9]


# ---------------------------------------------------------------- b. one line, always
def test_a_time_far_off_prints_numbers_at_a_sensible_precision(tmp_path):
    """Before: a time of 1e300 printed the grid size as a 300-digit number (a 501-character line)."""
    _csv(tmp_path / "r.csv", [("u1", 0, "a", 1), ("u1", 1, "b", 2), ("u1", 1e300, "a", 3)])
    res = _cli(tmp_path, str(tmp_path / "r.csv"), "--features", "a", "--window", "2", "--rate", "1",
               "--max-gap", "1e301")
    assert res.exit_code == 1, res.output
    line = _one_line(res.stderr)
    assert "1e+300 steps at 1 Hz" in line and "0" * 20 not in line, line


@pytest.mark.parametrize("option, value, problem", [
    ("--rate", "0", "Invalid value for '--rate': must be in (0, inf), got 0"),
    ("--rate", "nan", "Invalid value for '--rate': must be a finite number, got nan"),
    ("--max-gap", "inf", "Invalid value for '--max-gap': must be a finite number, got inf"),
    ("--window", "0", "Invalid value for '--window'"),
    ("--time-unit", "h", "Invalid value for '--time-unit'"),
])
def test_option_errors_are_one_line_in_one_style(tmp_path, option, value, problem):
    """Before: --rate 0 printed click's boxed five-line usage, --rate nan one line (exit 1)."""
    _many_users(tmp_path / "r.csv", 2)
    args = {"--features": "a", "--window": "1", option: value}
    res = _cli(tmp_path, str(tmp_path / "r.csv"), *[t for kv in args.items() for t in kv])
    assert res.exit_code == 2, res.output
    line = _one_line(res.stderr)
    assert line.startswith(f"error: {problem}") and line.endswith("(esnfed import [OPTIONS] [SOURCE]; see `esnfed import --help`)"), line
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- c. nothing left behind
@pytest.fixture(scope="module")
def slow_input(tmp_path_factory) -> Path:
    """An input that takes the import several seconds (20,000 users), to stop it midway."""
    return _many_users(tmp_path_factory.mktemp("slow") / "many.csv", 20_000)


def _temporaries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".mine.")) if root.exists() else []


def _start_and_wait_for_scratch(slow_input: Path, cwd: Path) -> subprocess.Popen:
    proc = _subprocess_cli(["import", str(slow_input), "--dataset", "mine", "--features", "a", "--window", "1",
                            "--out", "out"], cwd)
    deadline = time.monotonic() + 60
    while not any(".import." in n for n in _temporaries(cwd / "out")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no scratch folder appeared"
        time.sleep(0.02)
    return proc


def test_sigterm_removes_the_temporary_folders(tmp_path, slow_input):
    """Before: the scratch folder (a file per user) stayed behind."""
    proc = _start_and_wait_for_scratch(slow_input, tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert _one_line(err) == ("error: `esnfed import` stopped by SIGTERM; its temporary files were removed and "
                              "earlier outputs are untouched")
    assert _temporaries(tmp_path / "out") == []
    assert not (tmp_path / "out" / "mine").exists()


def test_the_next_run_reclaims_what_a_sigkill_left(tmp_path, slow_input):
    proc = _start_and_wait_for_scratch(slow_input, tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    left = _temporaries(tmp_path / "out")
    assert any(".import." in n for n in left), left  # a kill runs no clean-up: the next run must
    other = tmp_path / "out" / ".other.12345.0123456789abcdef.tmp"  # another dataset's: not this run's to judge
    other.mkdir()
    _csv(tmp_path / "small.csv", [("u1", 0, "a", 1), ("u1", 1, "b", 2)])
    run("mine", _params(tmp_path / "small.csv"), out_root=tmp_path / "out")
    assert _temporaries(tmp_path / "out") == [] and other.exists()
    assert check_folder(tmp_path / "out" / "mine") == []


# ---------------------------------------------------------------- d. cost per user
def test_the_spill_is_one_file_whatever_the_users(tmp_path):
    """Before: a scratch file per user, appended to once per chunk that holds the user."""
    _many_users(tmp_path / "r.csv", 300)
    seen = []
    scratch = lambda: [p for p in (tmp_path / "out").iterdir() if ".import." in p.name]  # noqa: E731
    run("mine", _params(tmp_path / "r.csv", chunk_rows=100), out_root=tmp_path / "out",
        on_user=lambda user, data: seen.append(sum(1 for _ in scratch()[0].iterdir())))
    assert len(seen) == 300 and set(seen) == {1}


def test_spilling_a_chunk_costs_no_scan_per_user(tmp_path):
    """Before: each chunk was scanned once per user it held (users x rows): a chunk of 40,000
    rows over 20,000 users took tens of seconds; grouped by a sort it takes milliseconds."""
    _many_users(tmp_path / "r.csv", 20_000)
    p = _params(tmp_path / "r.csv")
    chunk = next(import_readers._csv_chunks(tmp_path / "r.csv", p))
    spill = import_data.Spill(tmp_path, p)
    start = time.perf_counter()
    spill.add(chunk)
    assert time.perf_counter() - start < 5.0  # a 100-fold margin over this machine's time
    assert len(spill.pieces) == 20_000
    with open(spill.path, "rb") as f:
        rows = spill.rows("u123", np.arange(2), np.zeros(1, np.int64), f)
    np.testing.assert_array_equal(rows.time, [0.0, 1.0])
    np.testing.assert_array_equal(rows.features[:, 0], [123 % 7, 123 % 5])


def test_check_data_lines_stay_short_whatever_the_user_names(tmp_path):
    """Before: a 400-character user name was quoted whole in each of three lines (up to 1,067
    characters)."""
    folder = tmp_path / "f"
    folder.mkdir()
    long_name = "u" * 400
    manifest = {"dataset": "x", "window": 1, "n_features": 1, "feature_names": ["a"], "classes": ["a", "b"],
                "n_classes": 2, "context_names": ["all"], "n_contexts": 1,
                "users": {long_name: {"file": "z" * 300, "sha256": "0", "windows": 1, "windows_per_context": [1],
                                      "class_counts": [1, 0]}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    problems = check_folder(folder)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{folder / 'manifest.json'}: a user name of 400 characters, 'uuu")
    assert problems[0].endswith(f"...(400 in all) (at most {MAX_USER_CHARS}: it becomes a file name)")
    assert all(len(line) <= LINE for line in problems)

"""Failures and concurrency around the outputs: every OS failure (full disk, permissions, out of
memory) is one line and exit 1 with the earlier output intact (``--debug`` / ESNFED_DEBUG add
the traceback); a second run on the same output is refused naming the holder's pid; only our
own temporaries are removed; atomic replaces fsync and never leave a folder missing."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from esnfed_core.data.paths import path_problem
from esnfed_stages import _io
from esnfed_stages.data import preprocess as preprocess_stage
from test_data_stages import invoke, ok, one_line_error, project, snapshot, synthetic_root  # noqa: F401
from time_limit import time_limit

PROCESSED = Path("data/processed/wesad")


def _tmp_leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".lock"))]


# ----------------------------------------------------------------------------- OS failures
def _fail_fsync(monkeypatch, err: int):
    real = os.fsync

    def fsync(fd):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == "manifest.json":
            raise OSError(err, os.strerror(err))  # as a full disk reports it: no file name
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_full_disk_is_one_line_naming_the_output_and_keeps_the_earlier_one(project, monkeypatch):
    ok(invoke("preprocess", "--dataset", "wesad"))
    before = snapshot(PROCESSED)
    _fail_fsync(monkeypatch, errno.ENOSPC)
    line = one_line_error(invoke("preprocess", "--dataset", "wesad"))
    assert "data/processed/wesad" in line and "no space left on device" in line
    assert snapshot(PROCESSED) == before and not _tmp_leftovers(PROCESSED.parent)


def test_permission_error_is_one_line(project, monkeypatch):
    real = os.replace

    def replace(src, dst, **kw):
        if str(dst).endswith("wesad.json"):
            raise PermissionError(errno.EACCES, "Permission denied", str(dst))
        return real(src, dst, **kw)

    ok(invoke("preprocess", "--dataset", "wesad"))
    monkeypatch.setattr(os, "replace", replace)
    line = one_line_error(invoke("partition", "--dataset", "wesad"))
    assert "data/partitions/wesad.json: permission denied" in line
    assert not Path("data/partitions").exists()  # no output, no temporary, not even the folder it made


@pytest.mark.parametrize("args", [
    ("partition", "--dataset", "wesad", "--out", "blocker/sub"),  # a file above the folder (ENOTDIR)
    ("partition", "--dataset", "wesad", "--out", "blocker"),      # the folder itself is a file (EEXIST)
    ("preprocess", "--dataset", "wesad", "--out", "blocker"),
    ("synthesize", "--dataset", "wesad", "--out", "blocker"),
    ("synthesize", "--dataset", "wesad", "--out", "blocker/sub"),
])
def test_an_output_folder_that_is_a_file_is_named_as_such(project, args):
    # not the system's bare "File exists" / "Not a directory": which path, and what is wrong with it
    ok(invoke("preprocess", "--dataset", "wesad"))
    Path("blocker").write_text("a file, not a folder")
    before = sorted(p for p in project.rglob("*"))
    line = one_line_error(invoke(*args))
    assert line == "error: blocker: is a file, expected a folder"
    assert Path("blocker").read_text() == "a file, not a folder"
    assert sorted(p for p in project.rglob("*")) == before  # nothing written


def test_memory_error_is_one_line_and_leaves_nothing(project, monkeypatch):
    ok(invoke("preprocess", "--dataset", "wesad"))
    before = snapshot(PROCESSED)
    calls = []

    def exhausted(path, data):
        calls.append(path)
        if len(calls) == 2:
            raise MemoryError()
        return real(path, data)

    real = preprocess_stage.save_user
    monkeypatch.setattr(preprocess_stage, "save_user", exhausted)
    line = one_line_error(invoke("preprocess", "--dataset", "wesad"))
    assert "out of memory" in line and "preprocess" in line
    assert snapshot(PROCESSED) == before and not _tmp_leftovers(PROCESSED.parent)


def test_debug_shows_the_traceback(project, monkeypatch):
    ok(invoke("preprocess", "--dataset", "wesad"))
    _fail_fsync(monkeypatch, errno.ENOSPC)
    result = invoke("--debug", "preprocess", "--dataset", "wesad")
    assert result.exit_code == 1 and "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error:")
    assert "Traceback" not in invoke("preprocess", "--dataset", "wesad").stderr
    monkeypatch.setenv("ESNFED_DEBUG", "1")
    assert "Traceback (most recent call last)" in invoke("preprocess", "--dataset", "wesad").stderr


def test_real_os_error_in_a_subprocess(tmp_path):
    """The installed command, not CliRunner: one line on stderr, exit 1; the traceback on request."""
    (tmp_path / "params.yaml").write_text("data: {raw_dir: data/raw}\n")
    (tmp_path / "blocker").write_text("x")
    cmd = [str(Path(sys.executable).parent / "esnfed"), "download", "--dataset", "hhar", "--out", "blocker/raw",
           "--url", "http://127.0.0.1:9/x.zip", "--retries", "0"]
    env = {k: v for k, v in os.environ.items() if k != "ESNFED_DEBUG"}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: blocker") and "Traceback" not in proc.stderr
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env={**env, "ESNFED_DEBUG": "1"},
                          timeout=120)
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr


# --------------------------------------------------------- a second run on the same output
HOLD = textwrap.dedent("""
    import sys
    from esnfed_stages._io import output_lock
    with output_lock(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.readline()
""")


class Holder:
    """Another process holding the lock of ``path`` until the block ends."""

    def __init__(self, path: Path):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def __enter__(self):
        return self.proc

    def __exit__(self, *exc):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=60)


def test_second_run_on_the_same_output_is_refused_naming_the_holder(project):
    ok(invoke("preprocess", "--dataset", "wesad"))
    before = snapshot(PROCESSED)
    with Holder(PROCESSED.resolve()) as other:
        line = one_line_error(invoke("preprocess", "--dataset", "wesad"))
        assert "data/processed/wesad: in use by another esnfed run" in line and f"pid {other.pid}" in line
        assert snapshot(PROCESSED) == before
    ok(invoke("preprocess", "--dataset", "wesad"))  # free again once the other run ended
    assert not _tmp_leftovers(PROCESSED.parent)  # the lock file went with it


def test_wait_option_waits_for_the_other_run(project):
    ok(invoke("preprocess", "--dataset", "wesad"))
    holder = Holder(PROCESSED.resolve())

    def release():
        time.sleep(0.8)
        holder.__exit__()

    t = threading.Thread(target=release)
    t0 = time.monotonic()
    t.start()
    try:
        ok(invoke("--wait", "preprocess", "--dataset", "wesad"))  # blocks until the holder is gone
    finally:
        _io.set_lock_wait(False)  # the flag lives as long as the process: reset it for the next tests
        t.join()
    assert time.monotonic() - t0 >= 0.8 and holder.proc.returncode == 0
    assert not _tmp_leftovers(PROCESSED.parent)


def test_two_select_runs_on_the_same_share(tmp_path):
    from esnfed_core.errors import DataError
    from test_select import RIDGE, _select, make_dataset, small_params

    make_dataset(tmp_path)
    from esnfed_stages.layout import select_dir

    d = select_dir(tmp_path / "runs", "wesad", "ridge", "25")
    with Holder(d) as other:
        with pytest.raises(DataError, match=f"select/wesad/ridge/25: in use .*pid {other.pid}"):
            _select(tmp_path, small_params())
        assert not d.exists()  # refused before writing anything
        result = _select(tmp_path, small_params(), pcts=("50",))  # another share is free
    assert result.shares[0].ran > 0
    assert _select(tmp_path, small_params(), RIDGE).shares[0].ran > 0


def test_lock_is_exclusive_within_and_across_processes(tmp_path):
    out = tmp_path / "out"
    with _io.output_lock(out) as lock:
        assert lock.read_text().strip() == str(os.getpid())
        with pytest.raises(_io.LockedError, match=f"pid {os.getpid()}"):
            with _io.output_lock(out):
                pass
    assert not lock.exists()
    with _io.output_lock(out):  # reusable after release
        pass


def test_a_failed_run_leaves_no_empty_folders_and_keeps_what_others_hold(tmp_path):
    runs = tmp_path / "runs"
    with pytest.raises(RuntimeError, match="the stage failed"):
        with _io.output_lock(runs / "select" / "wesad" / "fedip" / "25"):
            raise RuntimeError("the stage failed")
    assert not runs.exists()  # every folder the lock made went with it
    (runs / "select").mkdir(parents=True)
    with _io.output_lock(runs / "select" / "wesad" / "ip" / "25"):
        with _io.output_lock(runs / "select" / "wesad" / "fedip" / "25"):
            pass
        assert (runs / "select" / "wesad").is_dir()  # still holds the other share's lock
    assert sorted(p.relative_to(runs).as_posix() for p in runs.rglob("*")) == ["select"]  # not made by us
    with _io.output_lock(out := runs / "select" / "wesad" / "ip" / "50"):
        _io.write_json(out / "best.json", {})
    assert (out / "best.json").is_file()  # a run's outputs keep their folders


def test_a_lock_folder_removed_by_a_failing_run_is_made_again(tmp_path, monkeypatch):
    folder = tmp_path / "runs" / "select"
    real_open, calls = os.open, []

    def racing_open(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 1:  # another run that failed removed the folder after our mkdir
            folder.rmdir()
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_io.os, "open", racing_open)
    with _io.output_lock(folder / "ridge") as lock:
        assert lock.is_file() and len(calls) == 2


def test_temporaries_carry_pid_and_token_and_only_stale_ones_of_ours_go(tmp_path):
    with _io.atomic_path(tmp_path / "a.json") as tmp:
        assert re.fullmatch(rf"\.a\.json\.{os.getpid()}\.[0-9a-f]{{16}}\.tmp", tmp.name)
        tmp.write_text("{}")
        live = tmp_path / f".b.json.{os.getpid()}.0123456789abcdef.tmp"  # ours, in flight
        live.write_text("")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".c.json.{dead.pid}.0123456789abcdef.tmp"
    stale.write_text("")
    foreign = [tmp_path / ".x.tmp", tmp_path / ".c.json.abc.tmp", tmp_path / f".d.{dead.pid}.tmp"]
    for p in foreign:
        p.write_text("not ours")
    assert _io.clean_stale_tmp(tmp_path) == [stale]
    assert live.exists() and all(p.exists() for p in foreign)


def test_atomic_replace_fsyncs_the_file_and_its_folder(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
    _io.write_json(tmp_path / "a.json", {"x": 1})
    assert any(p.endswith(".tmp") and "/.a.json." in p for p in synced)  # the data, before the rename
    assert str(tmp_path) in synced  # the rename itself
    synced.clear()
    with _io.atomic_path(tmp_path / "d") as tmp:
        tmp.mkdir()
        (tmp / "f.txt").write_text("f")
    assert any(p.endswith("/f.txt") for p in synced) and str(tmp_path) in synced


def _replace_many(folder: Path, n: int) -> None:
    for i in range(n):
        with _io.atomic_path(folder) as tmp:
            tmp.mkdir()
            (tmp / "v.txt").write_text(str(i))


def test_folder_replace_never_leaves_the_path_missing(tmp_path, monkeypatch):
    folder = tmp_path / "out"
    _replace_many(folder, 1)
    missing = []
    real = os.replace

    def replace(src, dst, **kw):  # every rename step is checked, not only the sampled moments
        real(src, dst, **kw)
        if not folder.is_dir():
            missing.append(("after rename", src, dst))

    monkeypatch.setattr(os, "replace", replace)
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            if not (folder / "v.txt").is_file():
                missing.append("reader saw no output")

    t = threading.Thread(target=reader)
    t.start()
    try:
        _replace_many(folder, 200)
    finally:
        stop.set()
        t.join()
    assert not missing, missing[:3]
    assert (folder / "v.txt").read_text() == "199"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old copies are gone


def test_folder_replace_without_an_atomic_swap_still_replaces(tmp_path, monkeypatch):
    monkeypatch.setattr(_io, "_exchange", lambda a, b: False)  # a file system without RENAME_EXCHANGE
    _replace_many(tmp_path / "out", 3)
    assert (tmp_path / "out" / "v.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ----------------------------------------------- leftovers of the input audit: what an input path is
def _no_blocking(seconds: int = 60):
    """Fail, instead of hanging the suite, if the code under test opens a FIFO for reading."""
    return time_limit(seconds, AssertionError(f"blocked for {seconds} s: a FIFO was opened for reading"))


def _replace_with(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "dir":
        path.mkdir()
    else:
        os.mkfifo(path)


KIND_PROBLEM = {"dir": "is a directory, expected a file", "fifo": "is not a regular file: a named pipe (FIFO)"}


def test_path_problem_says_what_is_there(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "p")
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    assert [path_problem(tmp_path / n) for n in ("f", "d", "p", "link", "none", "f/x")] == [
        None, KIND_PROBLEM["dir"], KIND_PROBLEM["fifo"], "file not found", "file not found", "file not found"]
    assert [path_problem(tmp_path / n, "no folder", folder=True) for n in ("d", "f", "p", "none")] == [
        None, "is a file, expected a folder", "is not a folder: a named pipe (FIFO)", "no folder"]


@pytest.mark.parametrize("kind", ["dir", "fifo"])
def test_a_raw_file_that_is_a_folder_or_a_fifo_is_named_as_such(project, kind):
    """Before: "<path>: file not found" for a path that exists."""
    pkl = Path("data/synthetic/WESAD/S3/S3.pkl")
    _replace_with(pkl, kind)
    with _no_blocking():
        line = one_line_error(invoke("preprocess", "--dataset", "wesad"))
    assert line == f"error: {pkl}: {KIND_PROBLEM[kind]}"
    assert not Path("data/processed").exists()


@pytest.mark.parametrize("kind", ["dir", "fifo"])
def test_a_processed_file_or_manifest_that_is_a_folder_or_a_fifo_is_named_as_such(project, kind):
    ok(invoke("preprocess", "--dataset", "wesad"))
    user = PROCESSED / "S3.npz"
    _replace_with(user, kind)
    with _no_blocking():
        result = invoke("check-data", str(PROCESSED))
    assert result.exit_code == 1 and f"{user}: {KIND_PROBLEM[kind]}" in result.output + result.stderr
    manifest = PROCESSED / "manifest.json"
    _replace_with(manifest, kind)
    with _no_blocking():
        line = one_line_error(invoke("partition", "--dataset", "wesad"))
    assert line == f"error: {manifest}: {KIND_PROBLEM[kind]}"


@pytest.mark.parametrize("kind", ["dir", "fifo"])
def test_a_params_file_or_import_source_that_is_a_folder_or_a_fifo_is_named_as_such(tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("x: 1\n")
    _replace_with(tmp_path / "params.yaml", kind)
    with _no_blocking():
        line = one_line_error(invoke("select", "--dataset", "wesad", "--algo", "ridge"))
    assert line == f"error: params.yaml: {KIND_PROBLEM[kind]}"
    if kind == "dir":  # no params.yaml now: the import reads none (a missing default is no error)
        (tmp_path / "params.yaml").rmdir()
    else:
        (tmp_path / "params.yaml").unlink()
    (tmp_path / "rec.csv").write_text("")
    _replace_with(tmp_path / "rec.csv", "fifo")
    with _no_blocking():
        line = one_line_error(invoke("import", "rec.csv", "--dataset", "mystudy",
                                     "--user", "u", "--time", "t", "--label", "y", "--features", "a",
                                     "--rate", "50", "--window", "10"))
    assert line == f"error: rec.csv: {KIND_PROBLEM['fifo']}"

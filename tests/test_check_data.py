"""The validator of the processed-data contract (esnfed check-data): a conforming folder passes,
and each violation of the catalogue is named in one line of its own."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.data.processed import UserData, save_user
from esnfed_stages.data.check_data import check_folder


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_valid(folder: Path, users=("u1", "u2"), windows=3, steps=4, features=2) -> dict:
    """A small conforming folder: 2 classes, 2 contexts."""
    folder.mkdir(parents=True)
    entries = {}
    rng = np.random.default_rng(0)
    for i, u in enumerate(users):
        x = rng.normal(size=(windows, steps, features)).astype(np.float32)
        y = (np.arange(windows * steps).reshape(windows, steps) % 2).astype(np.int8)
        ctx = np.array([0] * (windows - 1) + [1], dtype=np.int8)
        save_user(folder / f"{u}.npz", UserData(x, y, ctx))
        entries[u] = {"file": f"{u}.npz", "sha256": _sha(folder / f"{u}.npz"), "windows": windows,
                      "windows_per_context": [windows - 1, 1],
                      "class_counts": np.bincount(y.ravel(), minlength=2).tolist()}
    manifest = {"dataset": "mine", "window": steps, "n_features": features,
                "feature_names": [f"f{i}" for i in range(features)], "classes": ["rest", "walk"],
                "n_classes": 2, "context_names": ["morning", "evening"], "n_contexts": 2,
                "users": entries, "sources": {}, "params": {}, "source": "import"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _rewrite(folder: Path, manifest: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _resave(folder: Path, manifest: dict, user: str, **arrays) -> None:
    """Replace arrays of one user's file and update its sha256 (so only the named fault remains)."""
    with np.load(folder / f"{user}.npz") as z:
        data = {k: z[k] for k in z.files}
    data.update(arrays)
    data = {k: v for k, v in data.items() if v is not None}
    with open(folder / f"{user}.npz", "wb") as f:
        np.savez(f, **data)
    manifest["users"][user]["sha256"] = _sha(folder / f"{user}.npz")
    _rewrite(folder, manifest)


def test_conforming_folder_passes(tmp_path):
    write_valid(tmp_path / "d")
    assert check_folder(tmp_path / "d") == []


# (name, mutation, expected fragment of the one line naming it)
def _drop_key(m, f):
    del m["classes"]
    _rewrite(f, m)


def _bad_count(m, f):
    m["n_classes"] = 3
    _rewrite(f, m)


def _dup_feature(m, f):
    m["feature_names"] = ["f0", "f0"]
    _rewrite(f, m)


def _missing_file(m, f):
    (f / "u2.npz").unlink()


def _extra_file(m, f):

    (f / "stray.npz").write_bytes((f / "u1.npz").read_bytes())


def _sha_mismatch(m, f):
    m["users"]["u1"]["sha256"] = "0" * 64
    _rewrite(f, m)


def _x_dtype(m, f):
    with np.load(f / "u1.npz") as z:
        x = z["x"].astype(np.float64)
    _resave(f, m, "u1", x=x)


def _x_nan(m, f):
    with np.load(f / "u1.npz") as z:
        x = z["x"].copy()
    x[1, 0, 0] = np.nan
    _resave(f, m, "u1", x=x)


def _y_range(m, f):
    _resave(f, m, "u1", y=np.full((3, 4), 5, dtype=np.int8))


def _y_shape(m, f):
    _resave(f, m, "u1", y=np.zeros((3, 5), dtype=np.int8))


def _ctx_order(m, f):
    _resave(f, m, "u1", context=np.array([1, 0, 0], dtype=np.int8))


def _ctx_missing(m, f):
    _resave(f, m, "u1", context=None)


def _window_shape(m, f):
    m["window"] = 5
    _rewrite(f, m)


def _counts(m, f):
    m["users"]["u2"]["class_counts"] = [1, 1]
    _rewrite(f, m)


def _per_context(m, f):
    m["users"]["u2"]["windows_per_context"] = [1, 2]
    _rewrite(f, m)


def _pickled(m, f):
    with open(f / "u1.npz", "wb") as fh:
        np.savez(fh, x=np.array([object()], dtype=object), y=np.zeros(1), context=np.zeros(1))
    m["users"]["u1"]["sha256"] = _sha(f / "u1.npz")
    _rewrite(f, m)


def _bad_user_name(m, f):
    m["users"]["../evil"] = m["users"].pop("u2")
    _rewrite(f, m)


def _empty_context(m, f):
    """A context declared without data (imports.<name>.contexts naming a value no row holds)."""
    m["context_names"].append("night")
    m["n_contexts"] = 3
    for entry in m["users"].values():
        entry["windows_per_context"].append(0)
    _rewrite(f, m)


def _not_json(m, f):
    (f / "manifest.json").write_text("{not json")


CATALOGUE = [
    ("missing key", _drop_key, "manifest.json: missing key 'classes'"),
    ("count", _bad_count, "n_classes is 3 but classes has 2 names"),
    ("duplicate name", _dup_feature, "feature_names lists a name twice"),
    ("missing file", _missing_file, "u2.npz: file not found"),
    ("extra file", _extra_file, "stray.npz: not listed in manifest.json users"),
    ("sha256", _sha_mismatch, "u1.npz: sha256 differs"),
    ("x dtype", _x_dtype, "u1.npz: x must be float32 with 3 axes, got float64"),
    ("x NaN", _x_nan, "u1.npz: x holds NaN or infinity (first in window 1)"),
    ("y range", _y_range, "u1.npz: y holds labels outside 0..1"),
    ("y shape", _y_shape, "u1.npz: y has shape (3, 5), expected (3, 4)"),
    ("context order", _ctx_order, "u1.npz: context must be non-decreasing"),
    ("context missing", _ctx_missing, "u1.npz: missing array 'context'"),
    ("window", _window_shape, "x has windows of shape (4, 2), manifest.json says (5, 2)"),
    ("class counts", _counts, "u2.npz: the steps per class differ"),
    ("per context", _per_context, "u2.npz: the windows per context differ"),
    ("pickled", _pickled, "u1.npz: array 'x' holds Python objects"),
    ("user name", _bad_user_name, "user '../evil' is not a plain name"),
    ("json", _not_json, "manifest.json: not valid JSON"),
    ("empty context", _empty_context, "manifest.json: context 'night' (2) has no windows in any user (is it in "
                                      "imports.mine.contexts but in no row? remove it there and import again)"),
]


@pytest.mark.parametrize("mutate, expected", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE])
def test_each_violation_is_one_line(tmp_path, mutate, expected):
    folder = tmp_path / "d"
    manifest = write_valid(folder)
    mutate(manifest, folder)
    problems = check_folder(folder)
    assert any(expected in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_every_violation_is_listed_not_only_the_first(tmp_path):
    folder = tmp_path / "d"
    m = write_valid(folder)
    m["n_classes"] = 3
    m["users"]["u1"]["sha256"] = "0" * 64
    _rewrite(folder, m)
    (folder / "u2.npz").unlink()
    problems = check_folder(folder)
    assert len(problems) >= 3


def test_cli_exit_codes(tmp_path):
    folder = tmp_path / "d"
    m = write_valid(folder)
    runner = CliRunner()
    ok = runner.invoke(app, ["check-data", str(folder)])
    assert ok.exit_code == 0, ok.output
    m["n_contexts"] = 7
    _rewrite(folder, m)
    bad = runner.invoke(app, ["check-data", str(folder)])
    assert bad.exit_code == 1
    assert "n_contexts is 7 but context_names has 2 names" in bad.output


@pytest.mark.parametrize("arg, expected", [
    ("missing", "{tmp}/missing: no such folder"),
    ("d/u1.npz", "{tmp}/d/u1.npz: is a file, expected a folder (give the processed folder holding manifest.json"),
    ("", "{tmp}/manifest.json: not found (the processed folders are one level down: d)"),
    ("d", "{tmp}/d/manifest.json: n_contexts is 7 but context_names has 2 names"),
])
def test_cli_one_problem_is_one_error_line(tmp_path, arg, expected):
    """A path that is no processed folder (or one violation) is one line, not the line plus "1
    violation(s) of the data contract" (before: "missing: not a folder" for a path that does not exist)."""
    folder = tmp_path / "d"
    m = write_valid(folder)
    m["n_contexts"] = 7
    _rewrite(folder, m)
    res = CliRunner().invoke(app, ["check-data", str(tmp_path / arg) if arg else str(tmp_path)],
                             env={"COLUMNS": "2000"})
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + expected.format(tmp=tmp_path)), lines


def test_cli_prints_a_folder_name_with_brackets_as_it_is(tmp_path):
    """Rich read "[/x]" in a path as markup: a traceback (closing tag), or "[b]" vanished."""
    for name in ("d[/x]", "[b]d"):
        folder = tmp_path / name
        write_valid(folder)
        ok = CliRunner().invoke(app, ["check-data", str(folder)], env={"COLUMNS": "2000"})
        assert ok.exit_code == 0 and ok.stdout == f"{folder}: conforms to the processed-data contract\n", ok.output
        (folder / "u1.npz").unlink()
        (folder / "u2.npz").unlink()
        bad = CliRunner().invoke(app, ["check-data", str(folder)], env={"COLUMNS": "2000"})
        assert bad.exit_code == 1 and bad.stderr.splitlines()[-1] == (
            f"error: 2 violation(s) of the data contract in {folder}"), bad.output

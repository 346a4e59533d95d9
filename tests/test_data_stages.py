"""The data stages through the CLI (CliRunner in a temporary working directory): synthesize ->
preprocess -> partition outputs per the data contract, determinism, atomicity, and bad input."""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.data import py2pickle, safe_pickle, wesad_synth
from esnfed_core.data.processed import load_manifest, load_user
from esnfed_core.errors import DataError
from esnfed_stages.data import _datasets
from esnfed_stages.data.check_data import checked_manifest
from pickle_asm import ndarray_call, zeroed_flags_object_array

runner = CliRunner()
REPO_PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
SUBJECTS = ["S2", "S3", "S5"]


def params_doc(**over) -> dict:
    doc = {
        "data": {"source": "synthetic", "synthetic_dir": "data/synthetic", "raw_dir": "data/raw"},
        "synthetic": {"wesad": {"seed": 0, "scale": 0.005, "subjects": SUBJECTS}},
        "preprocess": {"wesad": {"window": 700, "contexts": 5, "subjects": SUBJECTS}},
        "partition": {"wesad": {"train": {50: ["S2"], 100: ["S2"]}, "validation": ["S3"], "test": ["S5"]}},
    }
    for key, value in over.items():
        doc[key] = value
    return doc


def write_params(path: Path, doc: dict) -> None:
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")


def invoke(*args: str):
    return runner.invoke(app, list(args))


def ok(result):
    assert result.exit_code == 0, result.output + (result.stderr or "")
    return result


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output + (result.stderr or "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def synthetic_root(tmp_path_factory) -> Path:
    """A small synthetic WESAD (3 subjects) generated once; tests copy it."""
    root = tmp_path_factory.mktemp("synth")
    wesad_synth.synthesize_wesad(root, seed=0, scale=0.005, subjects=SUBJECTS)
    return root


@pytest.fixture
def project(tmp_path, monkeypatch, synthetic_root) -> Path:
    """A working directory with params.yaml and the synthetic raw files in data/synthetic."""
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path / "params.yaml", params_doc())
    shutil.copytree(synthetic_root / "WESAD", tmp_path / "data" / "synthetic" / "WESAD")
    return tmp_path


# ---------------------------------------------------------------- the happy path

def test_synthesize_writes_the_layout_and_is_deterministic(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path / "params.yaml", params_doc())
    ok(invoke("synthesize", "--dataset", "wesad"))
    ok(invoke("synthesize", "--dataset", "wesad", "--out", "again"))
    ok(invoke("synthesize", "--dataset", "wesad", "--out", "other", "--seed", "1"))
    first = snapshot(tmp_path / "data" / "synthetic" / "WESAD")
    assert sorted(first) == sorted(f"{s}/{s}{suffix}" for s in SUBJECTS
                                   for suffix in (".pkl", "_quest.csv", "_readme.txt"))
    assert snapshot(tmp_path / "again" / "WESAD") == first
    assert snapshot(tmp_path / "other" / "WESAD")["S2/S2.pkl"] != first["S2/S2.pkl"]
    assert not [p for p in (tmp_path / "data" / "synthetic").iterdir() if p.name != "WESAD"]  # no temporaries


def test_preprocess_writes_the_contract(project):
    result = ok(invoke("preprocess", "--dataset", "wesad"))
    assert "S5" in result.output and "baseline" in result.output  # the summary table
    out = project / "data" / "processed" / "wesad"
    assert sorted(p.name for p in out.iterdir()) == ["S2.npz", "S3.npz", "S5.npz", "manifest.json"]
    m = load_manifest(out)
    assert m["dataset"] == "wesad" and m["source"] == "synthetic"
    assert m["window"] == 700 and m["n_features"] == 8
    assert m["feature_names"] == ["ACC_x", "ACC_y", "ACC_z", "Resp", "EDA", "ECG", "EMG", "Temp"]
    assert m["classes"] == ["baseline", "stress", "amusement", "meditation"] and m["n_classes"] == 4
    assert m["n_contexts"] == 5 and m["context_names"] == [f"run{i}" for i in range(5)]
    assert m["params"] == {"window": 700, "contexts": 5, "subjects": SUBJECTS}
    raw = project / "data" / "synthetic"
    assert m["sources"] == {f"WESAD/{s}/{s}.pkl": hashlib.sha256((raw / "WESAD" / s / f"{s}.pkl").read_bytes())
                            .hexdigest() for s in SUBJECTS}
    for s in SUBJECTS:
        entry, data = m["users"][s], load_user(out, s)
        with np.load(out / f"{s}.npz", allow_pickle=False) as z:
            assert z["x"].dtype == np.float32 and z["y"].dtype == np.int8 and z["context"].dtype == np.int8
        assert entry["file"] == f"{s}.npz" and entry["windows"] == data.windows
        assert entry["sha256"] == hashlib.sha256((out / f"{s}.npz").read_bytes()).hexdigest()
        assert entry["windows_per_context"] == np.bincount(data.context, minlength=5).tolist()
        assert min(entry["windows_per_context"]) >= 1
        assert np.all(np.diff(data.context) >= 0)  # ordered by context, then time
        assert entry["class_counts"] == np.bincount(data.y.ravel(), minlength=4).tolist()
        # Each context holds one class, the class its label run had.
        for c, label in enumerate(entry["context_labels"]):
            assert set(np.unique(data.y[data.context == c])) == {label}
        # Per-user z-score: the windows cover most kept rows, so moments are close to (0, 1).
        assert np.abs(data.x.reshape(-1, 8).mean(0)).max() < 0.3


def test_processed_bytes_are_deterministic(project):
    ok(invoke("preprocess", "--dataset", "wesad"))
    ok(invoke("preprocess", "--dataset", "wesad", "--out", "second"))
    assert snapshot(project / "data" / "processed" / "wesad") == snapshot(project / "second" / "wesad")


def test_partition_writes_the_splits(project):
    ok(invoke("preprocess", "--dataset", "wesad"))
    result = ok(invoke("partition", "--dataset", "wesad"))
    assert "train 50%" in result.output
    doc = json.loads((project / "data" / "partitions" / "wesad.json").read_text())
    assert doc == {"dataset": "wesad", "train": {"50": ["S2"], "100": ["S2"]}, "validation": ["S3"],
                   "test": ["S5"], "n_contexts": 5, "context_names": [f"run{i}" for i in range(5)]}


def test_source_raw_reads_the_raw_dir(project):
    err = one_line_error(invoke("preprocess", "--dataset", "wesad", "--source", "raw"))
    assert "data/raw/WESAD: WESAD folder not found" in err
    shutil.copytree(project / "data" / "synthetic" / "WESAD", project / "real" / "WESAD")
    ok(invoke("preprocess", "--dataset", "wesad", "--source", "raw", "--raw-dir", "real"))
    assert load_manifest(project / "data" / "processed" / "wesad")["source"] == "raw"


def test_repo_params_hold_the_protocol_splits():
    p = yaml.safe_load(REPO_PARAMS.read_text())["partition"]
    assert p["wesad"]["train"] == {25: ["S2", "S5", "S7"], 50: ["S2", "S5", "S7", "S8", "S11"],
                                   75: ["S2", "S5", "S7", "S8", "S11", "S13", "S15"],
                                   100: ["S2", "S5", "S7", "S8", "S11", "S13", "S15", "S16", "S17"]}
    assert p["wesad"]["validation"] == ["S3", "S9", "S14"] and p["wesad"]["test"] == ["S4", "S6", "S10"]
    assert p["hhar"]["train"] == {25: ["a", "b"], 50: ["a", "b", "c"], 75: ["a", "b", "c", "e"],
                                  100: ["a", "b", "c", "e", "h"]}
    assert p["hhar"]["validation"] == ["f", "i"] and p["hhar"]["test"] == ["d", "g"]


# ---------------------------------------------------------------- bad raw input: one line, exit 1,
# no partial output, the earlier output untouched

def _rewrite(path: Path, mutate) -> None:
    obj = safe_pickle.load_path(path)
    mutate(obj)
    with open(path, "wb") as f:
        py2pickle.dump(obj, f)


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


def _chest(key, value_fn):
    return lambda o: o["signal"]["chest"].__setitem__(key, value_fn(o["signal"]["chest"][key]))


def _set(arr, idx, value):
    arr = arr.copy()
    arr[idx] = value
    return arr


BAD_RAW = {
    "missing subject folder": (lambda p: shutil.rmtree(p.parent), "S5: subject folder not found"),
    "missing file": (lambda p: p.unlink(), "S5/S5.pkl: file not found"),
    "truncated pickle": (lambda p: p.write_bytes(p.read_bytes()[:5000]), "truncated pickle"),
    "corrupt pickle": (lambda p: p.write_bytes(b"\x80\x02}" + b"\xee" * 100), "corrupt pickle"),
    "malicious pickle": (lambda p: p.write_bytes(pickle.dumps({"signal": _Evil(p.parent / "pwned")}, protocol=2)),
                         "refused pickle global posix.system"),
    # numpy objects crafted from admitted globals (tests/test_safe_pickle_hostile.py): refused, never built
    "object dtype with zeroed flags": (lambda p: p.write_bytes(zeroed_flags_object_array()),
                                       "refused numpy object: dtype 'O8'"),
    "ndarray called with strides": (lambda p: p.write_bytes(ndarray_call(keyword=True)),
                                    "numpy.ndarray called directly"),
    "missing key": (lambda p: _rewrite(p, lambda o: o["signal"]["chest"].pop("EMG")), "missing key 'signal/chest/EMG'"),
    "wrong shape": (lambda p: _rewrite(p, _chest("ACC", lambda a: a[:, :2])), "signal/chest/ACC has shape"),
    "wrong dtype": (lambda p: _rewrite(p, lambda o: o.update(label=o["label"].astype(np.float32))),
                    "label has dtype float32, expected an integer array"),
    "lengths differ": (lambda p: _rewrite(p, _chest("Resp", lambda a: a[:-7])), "rows but label has"),
    "NaN": (lambda p: _rewrite(p, _chest("EDA", lambda a: _set(a, (10, 0), np.nan))), "signal/chest/EDA holds 1 NaN"),
    "inf": (lambda p: _rewrite(p, _chest("Temp", lambda a: _set(a, (3, 0), np.inf))), "signal/chest/Temp holds 1 NaN"),
    "no usable rows": (lambda p: _rewrite(p, lambda o: o.update(label=np.zeros_like(o["label"]))),
                       "no rows with labels 1, 2, 3, 4"),
}


@pytest.mark.parametrize("case", sorted(BAD_RAW))
def test_bad_raw_input_fails_cleanly_and_keeps_the_earlier_output(project, case):
    ok(invoke("preprocess", "--dataset", "wesad"))
    out = project / "data" / "processed"
    before = snapshot(out)
    path = project / "data" / "synthetic" / "WESAD" / "S5" / "S5.pkl"
    breaker, expected = BAD_RAW[case]
    breaker(path)
    err = one_line_error(invoke("preprocess", "--dataset", "wesad"))
    assert expected in err, err
    assert "S5" in err
    assert snapshot(out) == before  # earlier output untouched, no partial or temporary files
    assert not (path.parent / "pwned").exists()


def test_missing_raw_folder(project):
    shutil.rmtree(project / "data" / "synthetic")
    err = one_line_error(invoke("preprocess", "--dataset", "wesad"))
    assert "data/synthetic/WESAD: WESAD folder not found" in err
    assert not (project / "data" / "processed").exists() or not any((project / "data" / "processed").iterdir())


def test_failed_synthesize_keeps_the_earlier_folder(project, monkeypatch):
    folder = project / "data" / "synthetic" / "WESAD"
    before = snapshot(folder)
    real = wesad_synth.generate_subject

    def fail_on_s5(subject, seed, scale):
        if subject == "S5":
            raise MemoryError("simulated crash")
        return real(subject, seed, scale)

    monkeypatch.setattr(wesad_synth, "generate_subject", fail_on_s5)
    result = invoke("synthesize", "--dataset", "wesad", "--seed", "9")
    assert result.exit_code != 0
    assert snapshot(folder) == before
    assert [p.name for p in folder.parent.iterdir()] == ["WESAD"]


# ---------------------------------------------------------------- bad params and missing modules

@pytest.mark.parametrize("command", ["synthesize", "preprocess"])
def test_an_unknown_dataset_is_a_usage_error_listing_the_choices(project, command):
    """synthesize refuses a dataset it cannot write as the other data stages do: a usage error
    (exit 2) naming --dataset and the valid names, before params.yaml is read (preprocess: after,
    as a protocol variant of a paper dataset is declared there, preprocess.<name>.base)."""
    if command == "synthesize":
        (project / "params.yaml").write_text("not: [valid", encoding="utf-8")
    result = invoke(command, "--dataset", "foo")
    assert result.exit_code == 2, result.output + (result.stderr or "")
    text = " ".join(w for w in (result.output + (result.stderr or "")).split() if w not in "│╭╮╰╯─")
    assert "Invalid value for" in text and "--dataset" in text and "'foo'" in text
    assert "wesad" in text and "hhar" in text


def test_unknown_synthetic_param_names_the_key(project):
    doc = yaml.safe_load((project / "params.yaml").read_text())
    doc["synthetic"]["wesad"]["sclae"] = 0.1
    write_params(project / "params.yaml", doc)
    err = one_line_error(invoke("synthesize", "--dataset", "wesad"))
    assert "synthetic.wesad.sclae is not a parameter" in err


def test_bad_preprocess_param_names_the_key(project):
    doc = yaml.safe_load((project / "params.yaml").read_text())
    doc["preprocess"]["wesad"]["window"] = 0
    write_params(project / "params.yaml", doc)
    assert "preprocess.wesad.window" in one_line_error(invoke("preprocess", "--dataset", "wesad"))


def test_missing_dataset_module_is_one_line(project, monkeypatch):
    table = dict(_datasets._FUNCTIONS)
    table[("hhar", "preprocess")] = ("esnfed_core.data.no_such_reader", "preprocess_hhar")
    table[("hhar", "synthesize")] = ("esnfed_core.data.no_such_generator", "synthesize_hhar")
    monkeypatch.setattr(_datasets, "_FUNCTIONS", table)
    doc = yaml.safe_load((project / "params.yaml").read_text())
    doc["synthetic"]["hhar"] = {"seed": 0}
    doc["preprocess"]["hhar"] = {}
    write_params(project / "params.yaml", doc)
    assert "esnfed_core.data.no_such_reader is not available" in one_line_error(
        invoke("preprocess", "--dataset", "hhar"))
    assert "esnfed_core.data.no_such_generator is not available" in one_line_error(
        invoke("synthesize", "--dataset", "hhar"))


@pytest.mark.parametrize("spec, expected", [
    ({"train": {50: ["S2"], 100: ["S2", "S9"]}, "validation": ["S3"], "test": ["S5"]},
     "user 'S9' is not in"),
    ({"train": {50: ["S2", "S3"], 100: ["S2", "S5"]}, "validation": ["S3"], "test": ["S5"]},
     "train.100 must contain the smaller subsets"),
    ({"train": {100: ["S2", "S5"]}, "validation": ["S5"], "test": ["S3"]}, "train and validation share"),
    ({"train": {100: ["S2"]}, "validation": ["S5"], "test": ["S5"]}, "validation and test share"),
    ({"train": {150: ["S2"]}, "validation": ["S5"], "test": ["S3"]}, "percentages"),
    ({"train": {100: ["S2"]}, "validation": ["S5"]}, "exactly the keys train, validation, test"),
])
def test_bad_partition_specs(project, spec, expected):
    ok(invoke("preprocess", "--dataset", "wesad"))
    doc = yaml.safe_load((project / "params.yaml").read_text())
    doc["partition"]["wesad"] = spec
    write_params(project / "params.yaml", doc)
    assert expected in one_line_error(invoke("partition", "--dataset", "wesad"))
    assert not (project / "data" / "partitions" / "wesad.json").exists()


def test_partition_before_preprocess(project):
    err = one_line_error(invoke("partition", "--dataset", "wesad"))
    assert "manifest not found (run `esnfed preprocess --dataset wesad` first)" in err


def test_a_missing_manifest_of_your_own_dataset_points_to_import(tmp_path):
    """`esnfed preprocess` refuses a dataset of your own: the hint names the command that writes it."""
    with pytest.raises(DataError, match=r"mystudy/manifest.json: manifest not found \(run `esnfed import "
                                        r"--dataset mystudy`, or `esnfed preprocess --dataset mystudy` for a "
                                        r"protocol variant first\)"):
        checked_manifest(tmp_path / "processed" / "mystudy")


@pytest.mark.parametrize("manifest, expected", [
    ([], "manifest.json: expected a JSON object, got list"),
    ("users-null", "manifest.json: users must be a dict, got None"),
])
def test_partition_of_a_malformed_manifest_is_one_line(project, manifest, expected):
    """A manifest.json that is valid JSON of the wrong shape: one line naming it, no traceback."""
    ok(invoke("preprocess", "--dataset", "wesad"))
    path = project / "data" / "processed" / "wesad" / "manifest.json"
    if manifest == "users-null":
        manifest = {**json.loads(path.read_text()), "users": None}
    path.write_text(json.dumps(manifest))
    assert expected in one_line_error(invoke("partition", "--dataset", "wesad"))
    assert not (project / "data" / "partitions" / "wesad.json").exists()


def test_hhar_goes_through_the_same_stages(tmp_path, monkeypatch):
    """The dataset-agnostic stages dispatch to the HHAR modules: devices become the contexts."""
    monkeypatch.chdir(tmp_path)
    doc = params_doc()
    doc["synthetic"] = {"hhar": {"seed": 0, "seconds_per_activity": 4.0, "gap_seconds": 1.0,
                                 "users": ["a", "d", "f"], "models": ["nexus4", "s3", "s3mini", "lgwatch"]}}
    doc["preprocess"] = {"hhar": {"devices": ["nexus4", "s3", "s3mini", "lgwatch"]}}
    doc["partition"] = {"hhar": {"train": {100: ["a"]}, "validation": ["f"], "test": ["d"]}}
    write_params(tmp_path / "params.yaml", doc)
    ok(invoke("synthesize", "--dataset", "hhar"))
    ok(invoke("preprocess", "--dataset", "hhar"))
    ok(invoke("partition", "--dataset", "hhar"))
    m = load_manifest(tmp_path / "data" / "processed" / "hhar")
    assert m["context_names"] == ["nexus4", "s3", "s3mini", "lgwatch"] and m["n_contexts"] == 4
    assert m["classes"] == ["stand", "sit", "walk", "stairsup", "stairsdown", "bike"]
    assert m["window"] == 200 and m["n_features"] == 6 and sorted(m["users"]) == ["a", "d", "f"]
    csv = tmp_path / "data" / "synthetic" / "HHAR" / "Activity recognition exp" / "Phones_accelerometer.csv"
    assert m["sources"]["HHAR/Activity recognition exp/Phones_accelerometer.csv"] == \
        hashlib.sha256(csv.read_bytes()).hexdigest()
    data = load_user(tmp_path / "data" / "processed" / "hhar", "a")
    assert m["users"]["a"]["windows_per_context"] == np.bincount(data.context, minlength=4).tolist()
    part = json.loads((tmp_path / "data" / "partitions" / "hhar.json").read_text())
    assert part["context_names"] == m["context_names"] and part["test"] == ["d"]

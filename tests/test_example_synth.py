"""The embedded example of a user dataset (esnfed synthesize --dataset example): a plain CSV, same
seed same bytes, that esnfed import reads with the repository's imports.example."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd

from esnfed_core.data.example_synth import COLUMNS, synthesize_example
from esnfed_stages.data.check_data import check_folder
from esnfed_stages.data.import_data import run
from esnfed_stages.params.imports import import_params
from esnfed_stages.params.load import load_params

REPO = load_params(Path(__file__).resolve().parents[1] / "params.yaml")


def test_same_seed_same_bytes_and_a_plain_csv(tmp_path):
    a = synthesize_example(tmp_path / "a", 0, subjects=2, seconds_per_activity=1.0)
    b = synthesize_example(tmp_path / "b", 0, subjects=2, seconds_per_activity=1.0)
    c = synthesize_example(tmp_path / "c", 1, subjects=2, seconds_per_activity=1.0)
    assert a[0].read_bytes() == b[0].read_bytes() != c[0].read_bytes()
    df = pd.read_csv(a[0])
    assert tuple(df.columns) == COLUMNS
    assert sorted(df.subject.unique()) == ["P01", "P02"]
    assert set(df.session) == {"morning", "evening"} and set(df.activity) == {"rest", "walk", "run"}
    assert len(df) == 2 * 2 * 3 * 50  # subjects x sessions x activities x 1 s at 50 Hz


def test_the_repository_import_options_read_it(tmp_path):
    (path,) = synthesize_example(tmp_path, 0, subjects=3, seconds_per_activity=4.0)
    options = copy.deepcopy(REPO["imports"]["example"])
    options["source"] = str(path)
    manifest = run("example", import_params(options, "imports.example"), out_root=tmp_path / "out")
    assert check_folder(tmp_path / "out" / "example") == []
    assert manifest["label_map"] == {"rest": 0, "walk": 1, "run": 2}
    assert manifest["context_map"] == {"morning": 0, "evening": 1}
    # 3 activities x 4 s at 25 Hz = 300 steps per session -> 6 windows of 50 (the jittered clock
    # may end a session a step short: 5 whole windows)
    for entry in manifest["users"].values():
        assert all(w in (5, 6) for w in entry["windows_per_context"])

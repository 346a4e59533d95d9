"""A processed folder written under other import or preprocess settings than params.yaml's now is
refused by the stages that read it outside DVC (partition, select, retrain, assess, ...), with one
line naming the manifest, the key, both values and the command to rerun
(esnfed_stages/params/processed.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.errors import DataError
from esnfed_stages.params.processed import data_params
from esnfed_stages.experiment.trial_data import open_dataset

runner = CliRunner()
IMPORT = {"source": "rec.csv", "user": "who", "time": "t", "label": "act", "context": "sess",
          "features": ["a", "b"], "rate": 20, "window": 4}
SPLITS = {"train": {25: ["u1"], 50: ["u1", "u2"], 75: ["u1", "u2", "u3"], 100: ["u1", "u2", "u3", "u4"]},
          "validation": ["u5"], "test": ["u6"]}


def write_csv(path: Path) -> None:
    """Six users, two sessions of 4 s at 20 Hz, two activities, two features."""
    rng = np.random.default_rng(0)
    lines = ["who,t,act,sess,a,b"]
    for u in range(1, 7):
        for s, sess in enumerate(("s1", "s2")):
            for i in range(80):
                t = 100 * s + i / 20
                lines.append(f"u{u},{t:.3f},{'walk' if i % 20 < 10 else 'rest'},{sess},"
                             f"{rng.normal():.4f},{rng.normal():.4f}")
    path.write_text("\n".join(lines) + "\n")


def write_params(root: Path, **changes) -> Path:
    doc = {"datasets": ["mine"], "continual_datasets": ["mine"], "imports": {"mine": {**IMPORT, **changes}},
           "partition": {"mine": SPLITS}}
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def invoke(*args: str):
    return runner.invoke(app, list(args))


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output + (result.stderr or "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def imported(tmp_path, monkeypatch) -> Path:
    """rec.csv imported as `mine` under params.yaml's imports.mine."""
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "rec.csv")
    write_params(tmp_path)
    result = invoke("import", "--dataset", "mine")
    assert result.exit_code == 0, result.output + (result.stderr or "")
    return tmp_path


def test_partition_of_the_data_params_yaml_describes_runs(imported):
    result = invoke("partition", "--dataset", "mine")
    assert result.exit_code == 0, result.output + (result.stderr or "")


def test_partition_refuses_data_imported_under_another_window_and_rate(imported):
    """The user walkthrough: window and rate changed in params.yaml, no import since."""
    write_params(imported, window=8, rate=10)
    err = one_line_error(invoke("partition", "--dataset", "mine"))
    assert err == ("error: data/processed/mine/manifest.json: written with window 4 but params.yaml's "
                   "imports.mine.window is 8 (also rate): the processed data is stale; rerun "
                   "`esnfed import --dataset mine` (or `dvc repro import@mine`)")
    assert not (imported / "data" / "partitions").exists()


@pytest.mark.parametrize("change, expected", [
    ({"rate": 10}, "written with rate 20 but params.yaml's imports.mine.rate is 10"),
    ({"rate": None}, "written with rate 20 but params.yaml's imports.mine.rate is None"),  # resampling dropped
    ({"classes": ["walk", "rest"]}, "written with classes None but params.yaml's imports.mine.classes is "
                                    "['walk', 'rest']"),
    ({"source": "other.csv"}, "written with source 'rec.csv' but params.yaml's imports.mine.source is 'other.csv'"),
    ({"missing": "interpolate"}, "written with missing 'refuse' but params.yaml's imports.mine.missing is "
                                 "'interpolate'"),
])
def test_each_changed_import_setting_is_named(imported, change, expected):
    write_params(imported, **change)
    assert expected in one_line_error(invoke("partition", "--dataset", "mine"))


@pytest.mark.parametrize("change", [{"chunk_rows": 7}, {"source": "./rec.csv"}])
def test_what_changes_no_window_is_not_stale(imported, change):
    """chunk_rows only changes how the file is read; ./rec.csv is the same file as rec.csv."""
    write_params(imported, **change)
    result = invoke("partition", "--dataset", "mine")
    assert result.exit_code == 0, result.output + (result.stderr or "")


def test_the_experiment_stages_refuse_stale_data_too(imported):
    """select/retrain/assess open the dataset through open_dataset with the expected settings."""
    assert invoke("partition", "--dataset", "mine").exit_code == 0
    params = yaml.safe_load((imported / "params.yaml").read_text())
    params["imports"]["mine"]["window"] = 8
    with pytest.raises(DataError, match=r"manifest.json: written with window 4 but params.yaml's "
                                        r"imports.mine.window is 8: the processed data is stale; rerun "
                                        r"`esnfed import --dataset mine`"):
        open_dataset(Path("data"), "mine", data_params(params, "mine"))
    open_dataset(Path("data"), "mine", data_params(yaml.safe_load((imported / "params.yaml").read_text()), "mine"))


def test_select_refuses_stale_data(imported):
    from experiment_data import small_params, write_params as write_experiment_params
    from esnfed_stages.params.schema import embedded_read

    assert invoke("partition", "--dataset", "mine").exit_code == 0
    params = small_params()
    params.update(datasets=["mine"], continual_datasets=["mine"], study_datasets=[])
    params["assess"]["activation_datasets"] = []  # only the papers' datasets have activation densities
    params["imports"]["mine"] = {**IMPORT, "rate": 10}
    params["imported"] = {"mine": IMPORT["source"]}
    params["embedded"] = embedded_read(params)  # mine alone: none of the embedded data
    params["partition"]["mine"] = SPLITS
    for budget in params["budgets"].values():
        budget["space"]["mine"] = budget["space"]["wesad"]
    write_experiment_params(imported, params)
    err = one_line_error(invoke("select", "--dataset", "mine", "--algo", "ip", "--pct", "25"))
    assert "data/processed/mine/manifest.json: written with rate 20 but params.yaml's imports.mine.rate is 10" in err
    assert not (imported / "runs").exists()


def test_a_manifest_that_records_no_params_is_trusted(imported):
    """A folder written by hand (no params, or an empty object) has nothing to compare."""
    path = imported / "data" / "processed" / "mine" / "manifest.json"
    manifest = json.loads(path.read_text())
    write_params(imported, window=8)
    for recorded in ({}, None):
        if recorded is None:
            manifest.pop("params")
        else:
            manifest["params"] = recorded
        path.write_text(json.dumps(manifest))
        result = invoke("partition", "--dataset", "mine")
        assert result.exit_code == 0, result.output + (result.stderr or "")


def test_a_setting_the_manifest_predates_is_trusted(imported):
    path = imported / "data" / "processed" / "mine" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["params"]["drop_labels"]
    path.write_text(json.dumps(manifest))
    write_params(imported, drop_labels=[])
    assert invoke("partition", "--dataset", "mine").exit_code == 0


def test_the_papers_preprocess_section_is_compared_whole():
    """preprocess records its params.yaml section as it stands: a key changed, added or removed
    since differs; a dataset with neither imports nor preprocess settings has nothing to check."""
    params = {"preprocess": {"wesad": {"window": 700, "contexts": 5}}}
    expected = data_params(params, "wesad")
    expected.check(Path("p"), {"params": {"window": 700, "contexts": 5}})
    for recorded, message in (({"window": 350, "contexts": 5}, "written with window 350 but params.yaml's "
                                                                "preprocess.wesad.window is 700"),
                              ({"window": 700}, "written with contexts unset but params.yaml's "
                                                "preprocess.wesad.contexts is 5"),
                              ({"window": 700, "contexts": 5, "wrist_rate": 64},
                               "written with wrist_rate 64 but params.yaml's preprocess.wesad.wrist_rate is unset")):
        with pytest.raises(DataError, match=r"p/manifest.json: " + message.replace(".", r"\.") +
                           r": the processed data is stale; rerun `esnfed preprocess --dataset wesad` "
                           r"\(or `dvc repro preprocess@wesad`\)"):
            expected.check(Path("p"), {"params": recorded})
    assert data_params({}, "wesad") is None and data_params({"imports": {}}, "mine") is None

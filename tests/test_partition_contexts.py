"""`esnfed partition` refuses splits the continual methods cannot run on (a share's training users,
the validation or the test users without a whole context) and a context no user has a window of,
with one line naming the split and the context; the papers' datasets and the stationary-only ones
pass as before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.data.processed import UserData, save_user

runner = CliRunner()
CONTEXTS = ["lab", "home", "outdoor"]
# P08 recorded only the lab session (the user walkthrough's study); the others all three
HELD = {"P01": [0, 1, 2], "P02": [0, 1, 2], "P03": [0, 1, 2], "P04": [0, 1, 2], "P05": [0, 1, 2],
        "P06": [0, 1, 2], "P07": [0, 1, 2], "P08": [0]}
FIXED = {"train": {25: ["P03"], 50: ["P03", "P07"], 75: ["P03", "P07", "P04"], 100: ["P03", "P07", "P04", "P08"]},
         "validation": ["P02", "P05"], "test": ["P06", "P01"]}


def write_folder(folder: Path, held: dict[str, list[int]], names: list[str] = CONTEXTS, dataset: str = "mystudy") -> dict:
    """A processed folder per the contract: two windows per context a user holds."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    users = {}
    for user, contexts in held.items():
        ctx = np.repeat(np.asarray(contexts, np.int8), 2)
        x = rng.normal(size=(len(ctx), 4, 2)).astype(np.float32)
        y = (np.arange(len(ctx) * 4).reshape(len(ctx), 4) % 2).astype(np.int8)
        save_user(folder / f"{user}.npz", UserData(x, y, ctx))
        users[user] = {"file": f"{user}.npz", "sha256": hashlib.sha256((folder / f"{user}.npz").read_bytes()).hexdigest(),
                       "windows": len(ctx), "windows_per_context": np.bincount(ctx, minlength=len(names)).tolist(),
                       "class_counts": np.bincount(y.ravel(), minlength=2).tolist()}
    manifest = {"dataset": dataset, "window": 4, "n_features": 2, "feature_names": ["a", "b"],
                "classes": ["sit", "walk"], "n_classes": 2, "context_names": names, "n_contexts": len(names),
                "users": users, "sources": {}, "params": {}, "source": "import"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def write_params(root: Path, partition, continual: bool = True) -> Path:
    doc = {"datasets": ["mystudy"], "continual_datasets": ["mystudy"] if continual else [],
           "imports": {"mystudy": {"source": "data/mystudy.csv", "features": ["a", "b"], "window": 4,
                                   "context": "session"}},
           "partition": {"mystudy": partition}}
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_folder(tmp_path / "data" / "processed" / "mystudy", HELD)
    return tmp_path


def partition(*extra: str):
    return runner.invoke(app, ["partition", "--dataset", "mystudy", *extra])


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output + (result.stderr or "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _with(split: str, users: list[str]) -> dict:
    spec = json.loads(json.dumps(FIXED))
    if split == "train.25":
        spec["train"] = {25: users, 50: users + ["P07"], 75: users + ["P07", "P04"], 100: users + ["P07", "P04", "P03"]}
    else:
        rest = [u for u in ("P02", "P05", "P06", "P01") if u not in users]
        spec = {**spec, "validation": users if split == "validation" else rest[:2],
                "test": users if split == "test" else rest[:2]}
        spec["train"] = {25: ["P03"], 50: ["P03", "P07"], 75: ["P03", "P07", "P04"], 100: ["P03", "P07", "P04"]}
    return spec


@pytest.mark.parametrize("split, what", [("train.25", "the training users of share 25 (P08)"),
                                         ("validation", "the validation users (P08)"),
                                         ("test", "the test users (P08)")])
def test_a_split_without_a_context_is_refused_for_a_continual_dataset(project, split, what):
    write_params(project, _with(split, ["P08"]))
    err = one_line_error(partition())
    assert f"partition.mystudy: {split}: {what} have no windows in contexts 'home', 'outdoor'" in err
    assert "continual_datasets" in err and "data/processed/mystudy/manifest.json" in err
    assert not (project / "data" / "partitions").exists()


def test_the_smallest_share_missing_a_context_is_named(project):
    """Shares are nested: the smallest one short of a context is named (shares 25 and 50 both are)."""
    spec = _with("train.25", ["P08"])
    spec["train"][50] = ["P08"]
    write_params(project, spec)
    assert "train.25: the training users of share 25 (P08)" in one_line_error(partition())


def test_covering_splits_pass_and_record_the_context_names(project):
    write_params(project, FIXED)  # P08 is in share 100 only, beside users who hold every context
    assert partition().exit_code == 0
    doc = json.loads((project / "data" / "partitions" / "mystudy.json").read_text())
    assert doc["context_names"] == CONTEXTS and doc["train"]["100"][-1] == "P08"


def test_a_stationary_only_dataset_may_split_without_a_context(project):
    write_params(project, _with("train.25", ["P08"]), continual=False)
    result = partition()
    assert result.exit_code == 0, result.output + (result.stderr or "")


def test_a_drawn_split_without_a_context_names_the_seed(project):
    """fractions with a seed: find a seed whose 25 % share is P08 alone, then the refusal says to
    draw another split."""
    from esnfed_stages.data.partition import PartitionParams
    users = sorted(HELD)
    seed = next(s for s in range(200) if PartitionParams("mystudy", None, 0.25, 0.25, s).resolve(users)["train"]["25"] == ["P08"])
    write_params(project, {"fractions": {"validation": 0.25, "test": 0.25}, "seed": seed})
    err = one_line_error(partition())
    assert "train.25: the training users of share 25 (P08) have no windows in contexts 'home', 'outdoor'" in err
    assert "draw another split (partition.mystudy.seed or fractions)" in err


@pytest.mark.parametrize("continual", [True, False])
def test_a_context_no_user_holds_is_refused(tmp_path, monkeypatch, continual):
    """imports.<name>.contexts naming a value no row holds: the manifest lists a context without
    windows, which partition refuses for any dataset (and check-data reports)."""
    monkeypatch.chdir(tmp_path)
    write_folder(tmp_path / "data" / "processed" / "mystudy", HELD, CONTEXTS + ["car"])
    write_params(tmp_path, FIXED, continual=continual)
    err = one_line_error(partition())
    assert err == ("error: data/processed/mystudy/manifest.json: context 'car' (3) has no windows in any user "
                   "(is it in imports.mystudy.contexts but in no row? remove it there and import again)")
    assert not (tmp_path / "data" / "partitions").exists()


def test_a_malformed_count_of_windows_per_context_is_one_line(project):
    path = project / "data" / "processed" / "mystudy" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["users"]["P03"]["windows_per_context"] = [2, 2]
    path.write_text(json.dumps(manifest))
    write_params(project, FIXED)
    err = one_line_error(partition())
    assert "manifest.json: users.P03.windows_per_context must list 3 counts >= 0, got [2, 2]" in err


def test_select_of_a_continual_method_refuses_a_partition_that_misses_a_context(tmp_path):
    """A partition written before `esnfed partition` checked the contexts (or by hand): select of a
    continual method stops at once, naming the file, the split and the contexts, and writes nothing;
    a stationary method runs on it."""
    from experiment_data import TEST, TRAIN, VALIDATION, small_params, stage_options
    from experiment_data import write_params as write_experiment_params

    held = {u: [0, 1, 2] for u in TRAIN["100"] + VALIDATION + TEST} | {"u0": [0]}
    write_folder(tmp_path / "data" / "processed" / "wesad", held, dataset="wesad")
    (tmp_path / "data" / "partitions").mkdir()
    (tmp_path / "data" / "partitions" / "wesad.json").write_text(json.dumps(
        {"dataset": "wesad", "train": TRAIN, "validation": VALIDATION, "test": TEST, "n_contexts": 3,
         "context_names": CONTEXTS}))
    write_experiment_params(tmp_path, small_params())
    err = one_line_error(runner.invoke(app, ["select", "--algo", "clip", "--strategy", "naive", "--pct", "25",
                                             *stage_options(tmp_path)]))
    assert err == (f"error: {tmp_path}/data/partitions/wesad.json: train.25: the training users of share 25 (u0) "
                   "have no windows in contexts 'home', 'outdoor'; clip-naive trains, validates and tests on every "
                   "context: change partition.wesad in params.yaml and rerun `esnfed partition --dataset wesad`")
    assert not (tmp_path / "runs").exists()
    ok = runner.invoke(app, ["select", "--algo", "ip", "--pct", "25", *stage_options(tmp_path)])
    assert ok.exit_code == 0, ok.output + (ok.stderr or "")

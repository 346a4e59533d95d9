"""The opt-in IJCNN 2021 (IncFed paper) protocol variants (docs/protocol.md, "IJCNN 2021 protocol
variant"): `wesad_ijcnn` (WESAD in windows of 350) and `hhar_ijcnn` (HHAR with the paper's 32
engineered features, `features: ijcnn32`, in sequences of 500): the feature step checked against
hand computations, the variants preprocessed, partitioned, selected, retrained and assessed on tiny
embedded data; absent from the repository's params.yaml, so the default pipeline is unchanged."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from esnfed_core.data.hhar import preprocess_hhar, resolve_params
from esnfed_core.data.hhar_windows import FEATURE_NAMES, IJCNN32_NAMES, ijcnn32
from esnfed_core.data.processed import load_manifest
from esnfed_core.data.wesad import preprocess_wesad
from esnfed_core.errors import ConfigError
from esnfed_stages.report import protocol_tables
from esnfed_stages.params.schema import embedded_read, validate
from experiment_data import cli_ok, run_method_stages, small_params, ttest_and_report, write_params
from esnfed_stages.params.load import load_params

ROOT = Path(__file__).resolve().parents[1]
REPO_PARAMS = load_params(ROOT / "params.yaml")
WESAD_VARIANT = {"base": "wesad", "window": 350}
HHAR_VARIANT = {"base": "hhar", "features": "ijcnn32", "stats_window": 200, "stats_hop": 100, "window": 500}


def ijcnn_variants(p: dict) -> dict:
    """docs/protocol-variants.md's "IJCNN 2021 protocol variant" params, added to ``p``: wesad_ijcnn and hhar_ijcnn
    declared with their preprocessing, the papers' splits (3/3 and 2/2 held out, as the default
    ones), a space in every budget (as their base's), the extra tables."""
    for name, variant in (("wesad_ijcnn", WESAD_VARIANT), ("hhar_ijcnn", HHAR_VARIANT)):
        base = variant["base"]
        p["preprocess"][name] = copy.deepcopy(variant)
        p["partition"][name] = copy.deepcopy(p["partition"][base])
        for b in p["budgets"].values():
            b["space"][name] = copy.deepcopy(b["space"][base])
        p["datasets"] = [*p["datasets"], name]
    p["embedded"] = embedded_read(p)
    p["report"]["ijcnn_protocol"] = {"wesad": "wesad_ijcnn", "hhar": "hhar_ijcnn"}
    return p


# ---------------------------------------------------------------- the 32 features, by hand
def test_ijcnn32_columns_are_the_axes_their_windowed_statistics_and_the_two_magnitudes():
    assert len(IJCNN32_NAMES) == 32 and len(set(IJCNN32_NAMES)) == 32
    assert IJCNN32_NAMES[:6] == FEATURE_NAMES and IJCNN32_NAMES[30:] == ("acc_mag", "gyro_mag")
    assert IJCNN32_NAMES[6:12] == tuple(f"{a}_mean" for a in FEATURE_NAMES)
    assert IJCNN32_NAMES[24:30] == tuple(f"{a}_max" for a in FEATURE_NAMES)
    assert ijcnn32(np.ones((1000, 6)), 200, 100).shape == (801, 32)  # one row per step from row 199 on
    assert ijcnn32(np.ones((199, 6)), 200, 100).shape == (0, 32)  # no complete statistics window


def test_ijcnn32_statistics_equal_a_hand_computation_on_a_tiny_series():
    # acc_x = 0, 1, ..., 7; windows of 4 rows every 2: [0..3], [2..5], [4..7]
    v = np.zeros((8, 6))
    v[:, 0] = np.arange(8.0)
    v[:, 3] = [3.0, 0, 0, 0, 4, 0, 0, 0]  # gyro_x
    f = ijcnn32(v, 4, 2)
    assert f.shape == (5, 32)  # steps 3..7
    col = {name: f[:, i] for i, name in enumerate(IJCNN32_NAMES)}
    np.testing.assert_array_equal(col["acc_x"], [3, 4, 5, 6, 7])  # the axis at the step itself
    # step 3, 4: window [0..3]; steps 5, 6: [2..5]; step 7: [4..7] (held for a hop, ending at or before t)
    np.testing.assert_array_equal(col["acc_x_mean"], [1.5, 1.5, 3.5, 3.5, 5.5])
    np.testing.assert_array_equal(col["acc_x_min"], [0, 0, 2, 2, 4])
    np.testing.assert_array_equal(col["acc_x_max"], [3, 3, 5, 5, 7])
    # population std of 4 consecutive integers: sqrt(((1.5²+0.5²)·2)/4) = sqrt(1.25); exact to float64 rounding
    np.testing.assert_allclose(col["acc_x_std"], np.sqrt(1.25), rtol=1e-15)
    np.testing.assert_array_equal(col["gyro_x_max"], [3, 3, 4, 4, 4])
    np.testing.assert_array_equal(col["gyro_x_mean"], [0.75, 0.75, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(col["acc_y_std"], 0.0)


def test_ijcnn32_magnitudes_are_per_step_euclidean_norms():
    v = np.array([[3.0, 4.0, 0.0, 1.0, 2.0, 2.0], [0.0, 0.0, -5.0, 0.0, -3.0, 4.0]])
    f = ijcnn32(v, 1, 1)
    np.testing.assert_allclose(f[:, 30], [5.0, 5.0], rtol=1e-15)  # |acc| at that step
    np.testing.assert_allclose(f[:, 31], [3.0, 5.0], rtol=1e-15)  # |gyro| at that step


def test_ijcnn32_never_reads_a_row_after_the_step():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(900, 6))
    f = ijcnn32(v, 200, 100)
    for t in (199, 250, 299, 300, 517, 899):
        later = v.copy()
        later[t + 1:] = rng.normal(size=later[t + 1:].shape) * 10 + 5  # change every row after t
        g = ijcnn32(later, 200, 100)
        np.testing.assert_array_equal(g[: t - 198], f[: t - 198])  # rows up to t unchanged, bit for bit


def test_feature_keys_are_checked_naming_the_key():
    assert resolve_params({"features": "ijcnn32"})["stats_window"] == 200
    with pytest.raises(ConfigError, match=r"^params.yaml: preprocess.hhar.features: expected one of raw, ijcnn32, "
                                          r"got 'ijcnn'$"):
        resolve_params({"features": "ijcnn"})
    with pytest.raises(ConfigError, match=r"^params.yaml: preprocess.hhar.stats_hop: must be <= 200, got 300$"):
        resolve_params({"features": "ijcnn32", "stats_hop": 300})
    with pytest.raises(ConfigError, match=r"^params.yaml: preprocess.hhar.stats_window: must be >= 1, got 0$"):
        resolve_params({"features": "ijcnn32", "stats_window": 0})


# ---------------------------------------------------------------- params: opt-in and refusals
def test_ijcnn_protocol_asks_for_both_tables_an_unnamed_dataset_keeping_its_own_columns():
    p = ijcnn_variants(copy.deepcopy(REPO_PARAMS))
    p["report"]["ijcnn_protocol"] = {"hhar": "hhar_ijcnn"}
    specs = {spec.id: spec for spec in protocol_tables.specs(p)}
    assert sorted(specs) == ["ijcnn-protocol-hhar", "ijcnn-protocol-wesad"]
    assert specs["ijcnn-protocol-wesad"].datasets == ("wesad",)
    assert specs["ijcnn-protocol-hhar"].datasets == ("hhar_ijcnn",)
    assert specs["ijcnn-protocol-hhar"].published_table == "ijcnn-hhar"  # Table VI beside the variant's cells
    assert specs["ijcnn-protocol-hhar"].columns == ("train", "test") and specs["ijcnn-protocol-hhar"].pairs == (
        ("incfed", "fedavg"),)
    assert "wesad columns from `wesad` (preprocess.wesad, as the single protocol)" in specs["ijcnn-protocol-wesad"].note


def test_the_repository_params_declare_neither_variant():
    assert not any(name.endswith("_ijcnn") for name in REPO_PARAMS["preprocess"])
    assert "features" not in REPO_PARAMS["preprocess"]["hhar"]
    assert "ijcnn_protocol" not in REPO_PARAMS["report"]
    validate(ijcnn_variants(copy.deepcopy(REPO_PARAMS)))  # the guide's block is valid as it stands


def _declare(p: dict, names: list[str]) -> None:
    p.update(datasets=names, continual_datasets=["wesad"], study_datasets=["wesad"])
    p["embedded"] = embedded_read(p)


@pytest.mark.parametrize("edit, expected", [
    (lambda p: p["preprocess"]["hhar_ijcnn"].update(features="sozinov"),
     "params.yaml: preprocess.hhar_ijcnn.features: expected one of raw, ijcnn32, got 'sozinov'"),
    (lambda p: p["preprocess"]["hhar_ijcnn"].update(stats_hop=0),
     "params.yaml: preprocess.hhar_ijcnn.stats_hop: must be >= 1, got 0"),
    (lambda p: p["preprocess"]["wesad_ijcnn"].update(window=0),
     "params.yaml: preprocess.wesad_ijcnn.window: must be >= 1, got 0"),
    (lambda p: p["report"].update(ijcnn_protocol={"wesad": "hhar_ijcnn"}),
     "params.yaml: report.ijcnn_protocol.wesad: 'hhar_ijcnn' is not wesad nor a variant of it "
     "(preprocess.hhar_ijcnn.base: wesad)"),
    (lambda p: p["report"].update(ijcnn_protocol={"har": "hhar_ijcnn"}),
     "params.yaml: report.ijcnn_protocol: expected some of wesad, hhar as keys, got 'har'"),
    (lambda p: p["report"].update(ijcnn_protocol=[]),
     "params.yaml: report.ijcnn_protocol: expected a mapping of some of wesad, hhar to the declared dataset "
     "computing its columns, e.g. {wesad: wesad_ijcnn, hhar: hhar_ijcnn}, got an empty list"),
    (lambda p: _declare(p, ["wesad", "example", "wesad_ijcnn", "hhar_ijcnn"]),
     "params.yaml: report.ijcnn_protocol: needs wesad, hhar in datasets (tables ijcnn-wesad, ijcnn-hhar stand "
     "beside it, its t-tests come from there); datasets lacks 'hhar'"),
])
def test_a_bad_variant_is_refused_in_one_line_naming_the_key(edit, expected):
    p = ijcnn_variants(copy.deepcopy(REPO_PARAMS))
    edit(p)
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):  # the whole message, one line
        validate(p)


# ---------------------------------------------------------------- preprocess on tiny embedded data
@pytest.fixture(scope="module")
def variant_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ijcnn")
    p = ijcnn_variants(small_params())
    p["synthetic"]["hhar"].update(seconds_per_activity=4.0, gap_seconds=1.0)
    p["synthetic"]["wesad"].update(scale=0.005)
    for b in p["budgets"].values():
        for name in ("wesad_ijcnn", "hhar_ijcnn"):
            b["space"][name]["units"] = [8, 12]
    path = write_params(root, p)
    for ds in ("wesad", "hhar"):
        cli_ok("synthesize", "--dataset", ds, "--out", str(root / "raw"), "--params", str(path))
    common = ["--source", "synthetic", "--raw-dir", str(root / "raw"), "--out", str(root / "data" / "processed"),
              "--params", str(path)]
    for name in ("wesad_ijcnn", "hhar_ijcnn"):
        cli_ok("preprocess", "--dataset", name, *common)
        cli_ok("partition", "--dataset", name, "--params", str(path),
               "--processed-dir", str(root / "data" / "processed"), "--out", str(root / "data" / "partitions"))
    return root, p


def test_hhar_variant_writes_32_features_in_windows_of_500_counted_against_rows(variant_root):
    root, p = variant_root
    folder = root / "data" / "processed" / "hhar_ijcnn"
    m = load_manifest(folder)
    assert m["window"] == 500 and m["n_features"] == 32 and m["feature_names"] == list(IJCNN32_NAMES)
    assert m["params"] == HHAR_VARIANT  # recorded whole: the stale-data check compares preprocess.hhar_ijcnn
    reader = {k: v for k, v in HHAR_VARIANT.items() if k != "base"}
    counted = {u: info for u, _, info in preprocess_hhar(root / "raw", reader)}
    assert sorted(counted) == sorted(m["users"]) == list("abcdefghi")
    for user, info in counted.items():
        per_device = []
        for device in m["context_names"]:
            d = info["devices"][device]
            # the first stats_window - 1 usable rows have no complete window; then floor(rows / 500)
            assert d["rows_featured"] == d["rows_kept"] - 199
            assert d["windows"] == d["rows_featured"] // 500
            per_device.append(d["windows"])
        assert m["users"][user]["windows_per_context"] == per_device and sum(per_device) > 0
        with np.load(folder / f"{user}.npz", allow_pickle=False) as z:
            x = z["x"]
        assert x.shape == (sum(per_device), 500, 32) and x.dtype == np.float32
        # z-scored per user-device after the features: each column's mean over its kept rows is 0 (the
        # windows hold all but the tail), so over the windows it is small against the std of 1
        first = x[: per_device[0]].reshape(-1, 32)
        assert np.all(np.abs(first.mean(axis=0)) < 0.5) and np.all(first.std(axis=0) > 0.5)


def test_the_raw_default_is_unchanged_by_the_feature_keys(variant_root):
    root, _ = variant_root
    plain = {u: d.x for u, d, _ in preprocess_hhar(root / "raw", {"devices": ["nexus4"]})}
    keyed = {u: d.x for u, d, _ in preprocess_hhar(root / "raw", {"devices": ["nexus4"], "features": "raw",
                                                                   "stats_window": 50, "stats_hop": 10})}
    assert all(x.shape[2] == 6 and np.array_equal(x, keyed[u]) for u, x in plain.items())


def test_wesad_variant_cuts_windows_of_350(variant_root):
    root, p = variant_root
    m = load_manifest(root / "data" / "processed" / "wesad_ijcnn")
    assert m["window"] == 350 and m["n_features"] == 8 and m["params"] == WESAD_VARIANT
    reader = {k: v for k, v in WESAD_VARIANT.items() if k != "base"}
    halves = {s: d.windows for s, d, _ in preprocess_wesad(root / "raw", {})}  # the default: windows of 700
    for subject, data, info in preprocess_wesad(root / "raw", reader):
        assert data.x.shape[1:] == (350, 8) and m["users"][subject]["windows"] == data.windows
        # each label run of r rows gives floor(r / 350) windows: at least twice the windows of 700
        assert data.windows >= 2 * halves[subject] > 0


METHODS = [("random", None), ("ridge", None), ("fedavg", None), ("incfed", None)]  # the IncFed tables' rows


@pytest.fixture(scope="module")
def reported(variant_root):
    root, _ = variant_root
    for name in ("wesad_ijcnn", "hhar_ijcnn"):
        run_method_stages(root, name, METHODS)
    ttest_and_report(root)
    return root


def test_both_variants_run_through_select_retrain_assess(reported):
    root = reported
    for name in ("wesad_ijcnn", "hhar_ijcnn"):
        part = json.loads((root / "data" / "partitions" / f"{name}.json").read_text())
        held = (3, 3) if name == "wesad_ijcnn" else (2, 2)
        assert (len(part["validation"]), len(part["test"])) == held  # the paper's held-out users
        for algo, _ in METHODS:
            doc = json.loads((root / "runs" / "assess" / name / f"{algo}.json").read_text())
            scores = doc["pcts"]["100"]
            assert len(scores["test_accuracy"]) == 2  # the budget's retrains
            # the IncFed tables' train column: assess scores these methods on their training users too
            assert len(scores["train_accuracy"]) == 2
            assert all(0.0 <= a <= 1.0 for a in scores["test_accuracy"] + scores["train_accuracy"])


def _csv(path: Path) -> dict[tuple[str, str, str, str], dict[str, str]]:
    lines = [line.split(",") for line in path.read_text().splitlines()]
    head = lines[0]
    rows = [dict(zip(head, r)) for r in lines[1:]]
    return {(r["dataset"], r["pct"], r["method"], r["column"]): r for r in rows}


@pytest.mark.parametrize("paper, variant, roman", [("wesad", "wesad_ijcnn", "V"), ("hhar", "hhar_ijcnn", "VI")])
def test_the_report_writes_the_ijcnn_protocol_tables_beside_the_published_values(reported, paper, variant, roman):
    tables = reported / "reports" / "tables"
    text = (tables / f"ijcnn-protocol-{paper}.md").read_text()
    assert f"IncFed (IJCNN 2021), Table {roman}" in text and "under that paper's protocol" in text
    assert "Protocol: IncFed (IJCNN 2021) (docs/protocol.md, \"IJCNN 2021 protocol variant\")" in text
    settings = ", ".join(f"{k} {v}" for k, v in (WESAD_VARIANT if paper == "wesad" else HHAR_VARIANT).items()
                         if k != "base")
    assert f"{paper} columns from `{variant}` (preprocess.{variant}: {settings}); budget `default`" in text
    assert f"The single-protocol recomputation is table ijcnn-{paper}." in text
    published = yaml.safe_load((ROOT / "esnfed_stages" / "report" / "paper_results.yaml").read_text())[f"ijcnn-{paper}"]
    cells = _csv(tables / f"ijcnn-protocol-{paper}.csv")
    assessed = {m: json.loads((reported / "runs" / "assess" / variant / f"{m}.json").read_text()) for m, _ in METHODS}
    for method, _ in METHODS:  # random, centralised, FedAvg, IncFed; train and test
        for column in ("train", "test"):
            cell = cells[(variant, "100", method, column)]
            scores = assessed[method]["pcts"]["100"][f"{column}_accuracy"]
            # the cell is the mean of the variant's retrains, in percent, printed with two decimals
            assert float(cell["mean"]) == pytest.approx(100 * np.mean(scores), abs=0.005)
            label = {"ridge": "centralized"}.get(method, method)
            row = {str(k): v for k, v in published["rows"].items()}["100"]
            mean = row[published["columns"].index(f"{label}/{column}")][0]
            assert float(cell["published_mean"]) == pytest.approx(mean, abs=0.005)  # the paper's Table V/VI


# ---------------------------------------------------------------- dvc.yaml: the variants' stages only
@pytest.mark.dvc
def test_declaring_the_variants_adds_their_stages_and_changes_no_other(tmp_path):
    from test_dvc_datasets import variant_stages  # noqa: PLC0415 - DVC's own expansion of dvc.yaml

    variant = variant_stages(tmp_path, ijcnn_variants, ("wesad_ijcnn", "hhar_ijcnn"))
    for name, folder in (("wesad_ijcnn", "WESAD"), ("hhar_ijcnn", "HHAR")):
        assert f"data/synthetic/{folder}" in variant[f"preprocess@{name}"]["deps"]  # its base's embedded files
        assert f"assess-esn@{name}" in variant and f"assess-ip@{name}" in variant


# ---------------------------------------------------------------- the guide's blocks (docs/protocol-variants.md)
def _readme_blocks() -> list[dict]:
    text = (ROOT / "docs" / "protocol-variants.md").read_text()
    section = text[text.index("## IJCNN 2021 protocol variant"):]
    return [yaml.safe_load(block.split("```", 1)[0]) for block in section.split("```yaml\n")[1:]]


def test_readme_blocks_are_the_tested_variants_and_a_valid_ijcnn_budget():
    variants, budget = _readme_blocks()
    assert variants["preprocess"] == {"wesad_ijcnn": WESAD_VARIANT, "hhar_ijcnn": HHAR_VARIANT}
    p = ijcnn_variants(copy.deepcopy(REPO_PARAMS))
    assert {k: p[k] for k in ("datasets", "embedded")} == {k: variants[k] for k in ("datasets", "embedded")}
    assert {name: p["partition"][name] for name in variants["partition"]} == variants["partition"]
    assert p["report"]["ijcnn_protocol"] == variants["report"]["ijcnn_protocol"]
    p["budgets"].update(budget["budgets"])
    p["budget"] = budget["budget"]
    validate(p)  # the budget as the guide gives it, with the variants declared
    ijcnn = budget["budgets"]["ijcnn"]
    assert ijcnn["retrains"] == 3  # "3 repetitions of the experiments"
    space = ijcnn["space"]
    assert space["wesad_ijcnn"] == space["wesad"] and space["hhar_ijcnn"] == space["hhar"]
    assert (space["wesad"]["units"], space["hhar"]["units"]) == ([100, 250], [100, 500])  # Tables I, II

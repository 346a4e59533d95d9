"""The opt-in ESANN 2022 protocol variant (docs/protocol.md, "ESANN 2022 protocol variant"): a
second, differently preprocessed copy of HHAR (`hhar_esann`: Nexus4 only, native ~200 Hz, windows
of 400) declared beside the default one, preprocessed by the HHAR reader, partitioned, selected,
retrained, assessed and reported in reports/tables/esann-protocol.md; refused with one line
naming the key when its base is not a paper dataset; absent from the repository's params.yaml, so
the default pipeline is unchanged."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.data.hhar import preprocess_hhar, resolve_params
from esnfed_core.data.hhar_join import decimation_indices, kept_rows
from esnfed_core.data.processed import load_manifest
from esnfed_core.errors import ConfigError
from esnfed_stages.report import protocol_tables
from esnfed_stages.params.schema import embedded_read, validate
from experiment_data import cli_ok, make_dataset, run_method_stages, small_params, ttest_and_report, write_params
from esnfed_stages.params.load import load_params

ROOT = Path(__file__).resolve().parents[1]
REPO_PARAMS = load_params(ROOT / "params.yaml")
VARIANT = {"base": "hhar", "devices": ["nexus4"], "target_rate": "native", "window": 400}
runner = CliRunner()


def esann_variant(p: dict) -> dict:
    """docs/protocol-variants.md's "ESANN 2022 protocol variant" params, added to ``p``: hhar_esann declared with its
    preprocessing, the HHAR split (5-2-2, as the paper), a space in every budget, the extra table."""
    p["preprocess"]["hhar_esann"] = copy.deepcopy(VARIANT)
    p["partition"]["hhar_esann"] = copy.deepcopy(p["partition"]["hhar"])
    for b in p["budgets"].values():
        b["space"]["hhar_esann"] = copy.deepcopy(b["space"]["hhar"])
    p["datasets"] = [*p["datasets"], "hhar_esann"]
    p["embedded"] = embedded_read(p)
    p["report"]["esann_protocol"] = {"hhar": "hhar_esann"}
    return p


# ---------------------------------------------------------------- decimation at the native rate
def test_native_target_rate_keeps_every_row_and_a_number_follows_the_authors_formula():
    n = 1003
    assert np.array_equal(kept_rows(n, 200, "native"), np.arange(n))
    # target_rate equal to the model's rate as a number: the authors' np.around(np.arange(0, n-1, 1))
    # leaves out the last row (the default's s3mini at 100 Hz), so the default outputs stay as they were
    assert np.array_equal(kept_rows(n, 200, 200), np.arange(n - 1))
    assert np.array_equal(kept_rows(n, 200, 100), decimation_indices(n, 200, 100))
    assert resolve_params({"devices": ["nexus4"], "target_rate": "native"})["target_rate"] == "native"
    with pytest.raises(ConfigError, match=r"^params.yaml: preprocess.hhar.target_rate: expected a number \(Hz\) "
                                          r"or native \(no decimation\), got 'fast'$"):
        resolve_params({"target_rate": "fast"})


# ---------------------------------------------------------------- params: opt-in and refusals
def test_the_repository_params_declare_no_variant_and_no_protocol_table():
    assert not any("base" in (v or {}) for v in REPO_PARAMS["preprocess"].values())
    assert "esann_protocol" not in REPO_PARAMS["report"]
    assert protocol_tables.specs(REPO_PARAMS) == ()
    assert embedded_read(REPO_PARAMS) == REPO_PARAMS["embedded"]  # no preprocess stage added
    validate(esann_variant(copy.deepcopy(REPO_PARAMS)))  # the guide's block is valid as it stands


def _without_hhar(p: dict) -> None:
    p.update(datasets=["wesad", "example", "hhar_esann"], continual_datasets=["wesad"], study_datasets=["wesad"])
    p["embedded"] = embedded_read(p)


@pytest.mark.parametrize("edit, expected", [
    (lambda p: p["preprocess"]["hhar_esann"].update(base="example"),
     "params.yaml: preprocess.hhar_esann.base: expected one of wesad, hhar (a variant is a paper dataset "
     "preprocessed otherwise; import your own data with imports.hhar_esann), got 'example'"),
    (lambda p: p["preprocess"]["hhar_esann"].pop("base"),
     "params.yaml: preprocess.hhar_esann.base: expected one of wesad, hhar (a variant is a paper dataset "
     "preprocessed otherwise; import your own data with imports.hhar_esann), got None"),
    (lambda p: p["preprocess"]["hhar_esann"].update(window=0),
     "params.yaml: preprocess.hhar_esann.window: must be >= 1, got 0"),
    (lambda p: p["embedded"]["preprocess"].update(hhar_esann="WESAD"),
     "params.yaml: embedded.preprocess.hhar_esann: expected 'HHAR' (the folder of its base hhar, "
     "preprocess.hhar_esann.base), got 'WESAD'"),
    (lambda p: p["report"].update(esann_protocol={"hhar": "example"}),
     "params.yaml: report.esann_protocol.hhar: 'example' is not hhar nor a variant of it "
     "(preprocess.example.base: hhar)"),
    (lambda p: p["imports"].update(hhar_esann=dict(p["imports"]["example"])),
     "params.yaml: imports.hhar_esann: 'hhar_esann' is a variant of hhar (preprocess.hhar_esann.base): "
     "preprocessed, not imported; remove one of the two"),
    (lambda p: _without_hhar(p),
     "params.yaml: report.esann_protocol: needs wesad, hhar in datasets (table esann stands beside it, its "
     "t-tests come from there); datasets lacks 'hhar'"),
    (lambda p: p["preprocess"]["hhar_esann"].update(target_rate="fast"),
     "params.yaml: preprocess.hhar_esann.target_rate: expected a number (Hz) or native (no decimation), got 'fast'"),
    (lambda p: p["report"].update(esann_protocol={"har": "hhar_esann"}),
     "params.yaml: report.esann_protocol: expected some of wesad, hhar as keys, got 'har'"),
])
def test_a_bad_variant_is_refused_in_one_line_naming_the_key(edit, expected):
    p = esann_variant(copy.deepcopy(REPO_PARAMS))
    edit(p)
    with pytest.raises(ConfigError) as exc:
        validate(p)
    assert str(exc.value) == expected


def test_check_params_refuses_a_variant_of_your_own_dataset_with_exit_1(tmp_path):
    p = esann_variant(copy.deepcopy(REPO_PARAMS))
    p["preprocess"]["hhar_esann"]["base"] = "example"
    path = write_params(tmp_path, p)
    result = runner.invoke(app, ["check-params", "--params", str(path)])
    assert result.exit_code == 1
    lines = (result.stderr or result.output).strip().splitlines()
    assert len(lines) == 1 and "preprocess.hhar_esann.base" in lines[0]


# ---------------------------------------------------------------- preprocess on the embedded HHAR
def _tiny_hhar(root: Path) -> dict:
    p = esann_variant(small_params())
    p["synthetic"]["hhar"].update(seconds_per_activity=4.0, gap_seconds=1.0)
    path = write_params(root, p)
    cli_ok("synthesize", "--dataset", "hhar", "--out", str(root / "raw"), "--params", str(path))
    return p


@pytest.fixture(scope="module")
def variant_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("esann")
    p = _tiny_hhar(root)
    common = ["--source", "synthetic", "--raw-dir", str(root / "raw"), "--out", str(root / "data" / "processed"),
              "--params", str(root / "params.yaml")]
    cli_ok("preprocess", "--dataset", "hhar_esann", *common)
    return root, p


def test_variant_preprocess_keeps_nexus4_rows_at_the_native_rate_in_windows_of_400(variant_root):
    root, p = variant_root
    folder = root / "data" / "processed" / "hhar_esann"
    m = load_manifest(folder)
    assert m["dataset"] == "hhar_esann" and m["context_names"] == ["nexus4"] and m["window"] == 400
    assert m["params"] == VARIANT  # recorded whole: the stale-data check compares preprocess.hhar_esann
    # the reader's own row counts, user by user: every joined Nexus4 row kept, floor(rows / 400) windows
    reader = {"devices": ["nexus4"], "target_rate": "native", "window": 400}
    default = {"devices": ["nexus4"]}  # the single protocol: 100 Hz, windows of 200
    counted = {u: info["devices"]["nexus4"] for u, _, info in preprocess_hhar(root / "raw", reader)}
    at_100 = {u: info["devices"]["nexus4"] for u, _, info in preprocess_hhar(root / "raw", default)}
    assert sorted(counted) == sorted(m["users"]) == list("abcdefghi")
    for user, info in counted.items():
        assert info["rows_decimated"] == info["rows_joined"] > 400  # native: no row decimated away
        assert m["users"][user]["windows"] == info["rows_kept"] // 400 > 0
        assert m["users"][user]["windows_per_context"] == [m["users"][user]["windows"]]
        # the same joined stream at 100 Hz keeps every other row (the authors' decimation)
        assert at_100[user]["rows_joined"] == info["rows_joined"]
        assert at_100[user]["rows_decimated"] == decimation_indices(info["rows_joined"], 200, 100).size
        with np.load(folder / f"{user}.npz", allow_pickle=False) as z:
            assert z["x"].shape == (info["rows_kept"] // 400, 400, 6) and not z["context"].any()


# ---------------------------------------------------------------- end to end: the extra table
STATIONARY = [("incfed", None), ("fedip", None)]


@pytest.fixture(scope="module")
def reported(variant_root, tmp_path_factory):
    src, p = variant_root
    root = tmp_path_factory.mktemp("esann-e2e")
    p = copy.deepcopy(p)
    for b in p["budgets"].values():
        b["space"]["hhar_esann"]["units"] = [8, 12]
    write_params(root, p)
    params = str(root / "params.yaml")
    make_dataset(root, "wesad")
    make_dataset(root, "hhar")
    cli_ok("preprocess", "--dataset", "hhar_esann", "--source", "synthetic", "--raw-dir", str(src / "raw"),
           "--out", str(root / "data" / "processed"), "--params", params)
    cli_ok("partition", "--dataset", "hhar_esann", "--params", params,
           "--processed-dir", str(root / "data" / "processed"), "--out", str(root / "data" / "partitions"))
    for ds in ("wesad", "hhar", "hhar_esann"):
        run_method_stages(root, ds, STATIONARY)
    ttest_and_report(root)
    return root


def test_the_variant_runs_through_partition_select_retrain_assess(reported):
    part = json.loads((reported / "data" / "partitions" / "hhar_esann.json").read_text())
    assert [len(part["train"][s]) for s in ("25", "50", "75", "100")] == [2, 3, 4, 5]
    assert (len(part["validation"]), len(part["test"])) == (2, 2)  # 5-2-2, as the paper
    for method in ("incfed", "fedip"):
        doc = json.loads((reported / "runs" / "assess" / "hhar_esann" / f"{method}.json").read_text())
        assert len(doc["pcts"]["100"]["test_accuracy"]) == 2  # the budget's retrains
        assert all(0.0 <= a <= 1.0 for a in doc["pcts"]["100"]["test_accuracy"])


def test_the_report_writes_the_esann_protocol_table_beside_the_single_protocol_one(reported):
    tables = reported / "reports" / "tables"
    text = (tables / "esann-protocol.md").read_text()
    assert (tables / "esann.md").is_file()  # today's recomputation stays
    assert "Protocol: ESANN 2022" in text and "hhar columns from `hhar_esann`" in text
    assert "wesad columns from `wesad` (preprocess.wesad, as the single protocol)" in text
    assert "(preprocess.hhar_esann: devices ['nexus4'], target_rate native, window 400); budget `default`" in text
    assert "| train users | WESAD incfed | paper | WESAD fedip | paper | hhar_esann incfed | paper |" in text
    rows: dict[str, str] = {}  # the first table's rows (the differences to the paper follow)
    for line in text.splitlines():
        if line.startswith("| ") and "%" in line[:7]:
            rows.setdefault(line.split(" | ")[0], line)
    # the published ESANN Table 2 beside each cell, HHAR's beside the variant's columns
    assert "75.24 ± 1.63" in rows["| 25%"] and "*80.72 ± 0.99*" in rows["| 25%"].replace("**", "*")
    assert "n/a" not in rows["| 100%"].split(" | ")[1]
    cells = [line.split(",") for line in (tables / "esann-protocol.csv").read_text().splitlines()]
    head = cells[0]
    by = {(r[head.index("dataset")], r[head.index("pct")], r[head.index("method")]): r for r in cells[1:]}
    hhar = by[("hhar_esann", "50", "fedip")]
    assert float(hhar[head.index("published_mean")]) == pytest.approx(82.24)  # printed with two decimals
    assert hhar[head.index("n")] == "2" and hhar[head.index("p_value")] != ""  # tested, from ttest.json
    esann = {(r[head.index("dataset")], r[head.index("pct")], r[head.index("method")]): r
             for r in [line.split(",") for line in (tables / "esann.csv").read_text().splitlines()][1:]}
    # WESAD's columns are the wesad dataset's, the same cells as the single-protocol table
    assert by[("wesad", "75", "incfed")][head.index("mean")] == esann[("wesad", "75", "incfed")][head.index("mean")]
    assert "esann-protocol" in (reported / "reports" / "README.md").read_text()


# ---------------------------------------------------------------- dvc.yaml: the variant's stages only
@pytest.mark.dvc
def test_declaring_the_variant_adds_its_stages_and_changes_no_other(tmp_path):
    from test_dvc_datasets import variant_stages  # noqa: PLC0415 - DVC's own expansion of dvc.yaml

    variant = variant_stages(tmp_path, esann_variant, ("hhar_esann",))
    code = ["esnfed_cli", "esnfed_stages", "esnfed_core"]
    assert variant["preprocess@hhar_esann"] == {"cmd": "esnfed preprocess --dataset hhar_esann",
                                                "deps": [*code, "data/synthetic/HHAR", "params.yaml"],
                                                "outs": ["data/processed/hhar_esann"]}
    assert "select-ip@hhar_esann" in variant and "assess-esn@hhar_esann" in variant


def test_a_missing_variant_folder_names_preprocess_among_the_commands_to_run(tmp_path):
    from esnfed_core.errors import EsnfedError  # noqa: PLC0415
    from esnfed_stages.data.check_data import checked_manifest  # noqa: PLC0415

    with pytest.raises(EsnfedError, match=r"manifest not found \(run `esnfed import --dataset hhar_esann`, or "
                                          r"`esnfed preprocess --dataset hhar_esann` for a protocol variant first\)"):
        checked_manifest(tmp_path / "hhar_esann")

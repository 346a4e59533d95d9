"""The heterogeneous methods (issue 13) through the CLI on a tiny dataset: select -> retrain ->
assess -> ttest -> report, the budget's shares only, align-1 equal to IncFed, the table, the α
figure and the communication rows; and dvc.yaml's align stages match params.yaml's alphas."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.errors import ConfigError
from esnfed_stages.heterogeneity_params import hetero_params
from experiment_data import cli_ok, make_dataset, small_params, stage_options, write_params

ROOT = Path(__file__).resolve().parents[1]
SHARES = ["25", "100"]
runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hetero")
    make_dataset(root)
    params = small_params()
    params["heterogeneity"]["pcts"] = {"default": SHARES}
    write_params(root, params)
    common = stage_options(root)
    algos = ["--algo", "incfed", "--algo", "local", "--algo", "ensemble", "--algo", "align"]
    cli_ok("select", *algos, "--pct", "all", *common)  # several methods in one command, as dvc.yaml
    cli_ok("retrain", *algos, *common)
    cli_ok("assess", *algos, *common)
    assess = str(root / "runs" / "assess")
    p = str(root / "params.yaml")
    cli_ok("ttest", "--params", p, "--assess-dir", assess, "--out", str(root / "ttest.json"), "--allow-missing")
    cli_ok("report", "--params", p, "--assess-dir", assess, "--ttest", str(root / "ttest.json"),
           "--out-dir", str(root / "reports"), "--allow-missing", *_elsewhere(root))
    return root


def _elsewhere(root: Path) -> list[str]:
    """The report's other inputs under ``root`` (none there), never the current folder's runs/."""
    return ["--privacy-dir", str(root / "runs" / "privacy"), "--flower-dir", str(root / "runs" / "flower")]


def _assess(root: Path, method: str) -> dict:
    return json.loads((root / "runs" / "assess" / "wesad" / f"{method}.json").read_text())


def test_methods_run_the_budgets_shares_only(built):
    alphas = hetero_params(yaml.safe_load((built / "params.yaml").read_text())).alphas
    for method in ["local", "ensemble"] + [f"align-{a:g}" for a in alphas]:
        doc = _assess(built, method)
        assert sorted(doc["pcts"]) == sorted(SHARES), method
        assert sorted(p.name for p in (built / "runs" / "select" / "wesad" / method).iterdir()) == sorted(SHARES)
        for pct in SHARES:
            entry = doc["pcts"][pct]
            assert len(entry["test_accuracy"]) == 2
            assert [len(r) for r in entry["client_test_accuracy"]] == [{"25": 1, "100": 4}[pct]] * 2


def test_align_one_is_incfed_in_the_pipeline(built):
    inc, a1 = _assess(built, "incfed"), _assess(built, "align-1")
    for pct in SHARES:  # same trials, same selection, same retrain seeds: the same numbers
        assert a1["pcts"][pct]["test_accuracy"] == inc["pcts"][pct]["test_accuracy"]
        assert a1["pcts"][pct]["lambda"] == inc["pcts"][pct]["lambda"]


def test_local_is_the_mean_over_clients(built):
    doc = _assess(built, "local")
    for pct in SHARES:
        for score, clients in zip(doc["pcts"][pct]["test_accuracy"], doc["pcts"][pct]["client_test_accuracy"]):
            assert score == pytest.approx(sum(clients) / len(clients), abs=1e-12)


def test_report_table_figure_and_communication(built):
    tables = built / "reports" / "tables"
    md = (tables / "heterogeneous.md").read_text()
    assert "| WESAD | 25% |" in md and "| WESAD | 100% |" in md and "| WESAD | 50% |" not in md
    rows = list(csv.DictReader(io.StringIO((tables / "heterogeneous.csv").read_text())))
    inc = _assess(built, "incfed")
    cell = next(r for r in rows if r["dataset"] == "wesad" and r["pct"] == "100" and r["method"] == "incfed")
    scores = inc["pcts"]["100"]["test_accuracy"]
    assert float(cell["mean"]) == pytest.approx(100 * sum(scores) / len(scores))
    tests = json.loads((built / "ttest.json").read_text())["comparisons"]
    het = [c for c in tests if c["table"] == "heterogeneous" and c["dataset"] == "wesad"]
    assert {c["b"] for c in het} == {"ensemble"} and len(het) == 2 * 8  # 2 shares × 8 methods against it
    # what the tests were computed from, the heterogeneous files included (the report compares them)
    assert {"wesad/local", "wesad/ensemble", "wesad/align-0.5", "wesad/incfed"} <= \
        set(json.loads((built / "ttest.json").read_text())["assess_digests"])
    assert (built / "reports" / "figures" / "heterogeneous-alpha.png").read_bytes()[:4] == b"\x89PNG"
    plot = list(csv.DictReader(io.StringIO((built / "reports" / "plots" / "heterogeneous-alpha.csv").read_text())))
    assert [float(r["alpha"]) for r in plot] == [0, 0.25, 0.5, 0.75, 0.9, 1]
    comm = list(csv.DictReader(io.StringIO((tables / "communication.csv").read_text())))
    new = [r for r in comm if r["method"] in ("local", "ensemble") or r["method"].startswith("align-")]
    assert len(new) == 8 * 2 and all(r["match"] == "yes" for r in new)


def test_assess_records_the_settings_and_the_report_refuses_other_ones(built, tmp_path):
    """The table's header prints params.yaml's heterogeneity settings: an assess file computed under
    other ones is refused (one line naming it and what to rerun), nothing written."""
    params = yaml.safe_load((built / "params.yaml").read_text())
    assert _assess(built, "ensemble")["params"] == hetero_params(params).record == {
        "heterogeneity.seed": 0, "heterogeneity.mode": "space", "heterogeneity.combine": "softmax",
        "heterogeneity.vary": ["spectral_radius", "leak", "input_scaling"]}
    assert "params" not in _assess(built, "incfed")  # a stationary method: no heterogeneity
    params["heterogeneity"]["combine"] = "vote"
    write_params(tmp_path, params)
    result = runner.invoke(app, ["report", "--params", str(tmp_path / "params.yaml"), "--assess-dir",
                                 str(built / "runs" / "assess"), "--ttest", str(built / "ttest.json"),
                                 "--out-dir", str(tmp_path / "reports"), "--allow-missing", *_elsewhere(built)])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {built / 'runs' / 'assess' / 'wesad' / 'local.json'}: computed with combine 'softmax' but "
        "params.yaml's heterogeneity.combine is 'vote': rerun select, retrain and `esnfed assess --dataset wesad "
        "--algo local` under it (dvc repro does)"]
    assert not (tmp_path / "reports").exists()


def test_dvc_stages_list_params_alphas():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    ids = [m.id for m in hetero_params(params).methods()]
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for kind, stage in (("select", "select-hetero"), ("models", "retrain-hetero")):
        outs = [next(iter(o)) for o in stages[stage]["do"]["outs"]]
        assert outs == [f"runs/{kind}/${{item}}/{m}" for m in ids]
    assert stages["assess-hetero"]["do"]["outs"] == [f"runs/assess/${{item}}/{m}.json" for m in ids]
    assert all("--algo local --algo ensemble --algo align" in stages[s]["do"]["cmd"]
               for s in ("select-hetero", "retrain-hetero", "assess-hetero"))


@pytest.mark.parametrize("change, match", [
    ({"mode": "other"}, "heterogeneity.mode"), ({"vary": ["units"]}, "units cannot vary"),
    ({"alphas": [0.5, 1.5]}, "heterogeneity.alphas"), ({"pcts": {"default": ["30"]}}, "heterogeneity.pcts"),
    ({"extra": 1}, "heterogeneity.extra"),
])
def test_bad_heterogeneity_params_name_the_key(change, match):
    params = small_params()
    params["heterogeneity"].update(change)
    with pytest.raises(ConfigError, match=match):
        hetero_params(params)


def test_alpha_is_for_align_only(tmp_path):
    result = runner.invoke(app, ["select", "--dataset", "wesad", "--algo", "incfed", "--alpha", "0.5",
                                 "--params", str(ROOT / "params.yaml"), "--data-dir", str(tmp_path)])
    assert result.exit_code != 0 and "--alpha" in result.output


@pytest.mark.parametrize("command", ["select", "retrain"])
def test_a_share_outside_the_budgets_heterogeneity_pcts_is_an_error(tmp_path, command):
    """--pct 50 where heterogeneity.pcts.default is [25, 100]: one line naming the key, exit 1,
    nothing written (it used to exit 0 after running nothing)."""
    make_dataset(tmp_path)
    params = small_params()
    params["heterogeneity"]["pcts"] = {"default": SHARES}
    write_params(tmp_path, params)
    result = runner.invoke(app, [command, "--dataset", "wesad", "--algo", "local", "--pct", "50",
                                 "--params", str(tmp_path / "params.yaml"), "--data-dir", str(tmp_path / "data"),
                                 "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "heterogeneity.pcts.default (25, 100)" in lines[0] and "--pct 50" in lines[0]
    assert not list(tmp_path.joinpath("runs").rglob("*.json"))

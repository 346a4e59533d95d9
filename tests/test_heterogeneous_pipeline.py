"""The heterogeneous methods through the CLI on a tiny dataset: select -> retrain ->
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
from esnfed_stages.params.hetero import hetero_params
from experiment_data import TEST, cli_ok, make_dataset, small_params, stage_options, write_params
from esnfed_stages.params.load import load_params

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
    """The report's other inputs under ``root`` (empty folders: those stages not run), never the
    current folder's runs/ or data/ (a folder named on the command line must be there)."""
    folders = [root / "runs" / "privacy", root / "runs" / "flower", root / "runs" / "select", root / "data"]
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
    return ["--privacy-dir", str(folders[0]), "--flower-dir", str(folders[1]), "--select-dir", str(folders[2]),
            "--data-dir", str(folders[3])]


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


def test_report_under_runs_dir_reads_no_folder_of_the_current_one(built, tmp_path, monkeypatch):
    """`esnfed report --runs-dir R` reads assess/, select/, privacy/ and flower/ under R: in a
    current folder holding another run's runs/ (a decoy whose best.json is not JSON, as a
    `make repro` of another budget would leave one the report refuses), it writes the same tables
    as the fixture's report, which named every folder."""
    decoy = tmp_path / "cwd"
    for sub in ("select/wesad/incfed/25", "assess/wesad", "privacy", "flower/wesad"):
        (decoy / "runs" / sub).mkdir(parents=True)
    (decoy / "runs" / "select" / "wesad" / "incfed" / "25" / "best.json").write_text("not json")
    (decoy / "runs" / "assess" / "wesad" / "incfed.json").write_text("not json")
    monkeypatch.chdir(decoy)
    out = tmp_path / "reports"
    cli_ok("report", "--params", str(built / "params.yaml"), "--runs-dir", str(built / "runs"),
           "--ttest", str(built / "ttest.json"), "--out-dir", str(out), "--allow-missing",
           "--data-dir", str(built / "data"))
    for name in ("heterogeneous.csv", "communication.csv", "selected.csv"):
        mine, fixture = out / "tables" / name, built / "reports" / "tables" / name
        assert mine.read_bytes() == fixture.read_bytes(), name


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
        f"{tmp_path / 'params.yaml'}'s heterogeneity.combine is 'vote': rerun select, retrain and `esnfed assess --dataset wesad "
        "--algo local` under it (dvc repro does)"]
    assert not (tmp_path / "reports").exists()


def test_dvc_stages_list_params_alphas():
    params = load_params(ROOT / "params.yaml")
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


def _copy(built: Path, root: Path, edit=None) -> list[str]:
    """``built``'s params, data and runs under ``root``, params.yaml edited by ``edit`` -> the stage options."""
    import shutil

    for name in ("data", "runs"):
        shutil.copytree(built / name, root / name)
    params = yaml.safe_load((built / "params.yaml").read_text())
    if edit is not None:
        edit(params["heterogeneity"])
    write_params(root, params)
    return stage_options(root)


def test_select_and_retrain_record_the_settings(built):
    record = hetero_params(yaml.safe_load((built / "params.yaml").read_text())).record
    for method in ("local", "ensemble", "align-0.5"):
        for pct in SHARES:
            select = built / "runs" / "select" / "wesad" / method / pct
            assert json.loads((select / "best.json").read_text())["params"] == record
            assert json.loads((select / "trial-0000.json").read_text())["params"] == record
            model = built / "runs" / "models" / "wesad" / method / pct / "seed-0.json"
            assert json.loads(model.read_text())["params"] == record
    for kind in ("select/wesad/incfed/25/best.json", "models/wesad/incfed/25/seed-0.json"):
        assert "params" not in json.loads((built / "runs" / kind).read_text())  # no heterogeneity


@pytest.mark.parametrize("edit, recorded, now", [
    (lambda h: h.update(mode="seed"), "mode 'space'", "heterogeneity.mode is 'seed'"),
    (lambda h: h.update(seed=1), "seed 0", "heterogeneity.seed is 1"),
    (lambda h: h.update(vary=["leak"]), "vary ['spectral_radius', 'leak', 'input_scaling']",
     "heterogeneity.vary is ['leak']"),
], ids=["mode", "seed", "vary"])
def test_retrain_and_assess_refuse_a_selection_or_model_of_other_settings(built, tmp_path, edit, recorded, now):
    """heterogeneity.mode, seed and vary act at select and retrain: after an edit, `esnfed assess`
    alone would score the old models under the new settings' label, and `esnfed retrain` alone
    retrain the config selected under the old ones. Each names the first file and its rerun."""
    common = _copy(built, tmp_path, edit)
    runs = tmp_path / "runs"
    assess = (runs / "assess" / "wesad" / "local.json").read_bytes()
    result = runner.invoke(app, ["assess", "--algo", "local", *common])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {runs / 'models' / 'wesad' / 'local' / '25' / 'seed-0.json'}: retrained with {recorded} but "
        f"{tmp_path / 'params.yaml'}'s {now}: rerun `esnfed retrain --dataset wesad --algo local --pct 25`"]
    assert (runs / "assess" / "wesad" / "local.json").read_bytes() == assess
    result = runner.invoke(app, ["retrain", "--algo", "align", "--alpha", "0.5", *common])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {runs / 'select' / 'wesad' / 'align-0.5' / '25' / 'best.json'}: selected with {recorded} but "
        f"{tmp_path / 'params.yaml'}'s {now}: rerun `esnfed select --dataset wesad --algo align --alpha 0.5 --pct 25`"]


def test_files_without_the_settings_are_trusted_and_a_resumed_model_records_them(built, tmp_path):
    """Files written before the settings were recorded: trusted; retrain resumes such a model (its
    key holds the settings) and records params.yaml's settings in it."""
    common = _copy(built, tmp_path)
    record = hetero_params(yaml.safe_load((tmp_path / "params.yaml").read_text())).record
    paths = [p for p in (tmp_path / "runs").rglob("*.json") if "local" in p.parts and "assess" not in p.parts]
    for p in paths:
        doc = json.loads(p.read_text())
        del doc["params"]
        p.write_text(json.dumps(doc))
    npz = {p: p.read_bytes() for p in (tmp_path / "runs" / "models" / "wesad" / "local").rglob("seed-*.npz")}
    cli_ok("retrain", "--algo", "local", *common)
    assert npz and all(p.read_bytes() == b for p, b in npz.items())  # resumed, not retrained
    models = sorted((tmp_path / "runs" / "models" / "wesad" / "local").rglob("seed-*.json"))
    assert models and all(json.loads(p.read_text())["params"] == record for p in models)
    cli_ok("assess", "--algo", "local", *common)


def test_study_datasets_bound_the_heterogeneous_and_deep_tables(built, tmp_path):
    """params.yaml study_datasets: [wesad] (the deep, heterogeneous and flower stages run on WESAD
    only): the heterogeneous and deep tables show WESAD alone, and ttest and report no longer list
    HHAR's files of those methods as missing (they did: the tables were fixed to both datasets)."""
    studies = ("local", "ensemble", "deep-incfed", "deep-fedip") + tuple(
        f"align-{a:g}" for a in hetero_params(yaml.safe_load((built / "params.yaml").read_text())).alphas)

    def hhar_studies(missing):
        return [m for m in missing if Path(m).parent.name == "hhar" and Path(m).stem in studies]

    assert len(hhar_studies(json.loads((built / "ttest.json").read_text())["missing"])) == 10  # before
    params = yaml.safe_load((built / "params.yaml").read_text())
    params["study_datasets"] = ["wesad"]
    p, assess, ttest = str(write_params(tmp_path, params)), str(built / "runs" / "assess"), str(tmp_path / "ttest.json")
    cli_ok("ttest", "--params", p, "--assess-dir", assess, "--out", ttest, "--allow-missing")
    doc = json.loads((tmp_path / "ttest.json").read_text())
    assert doc["missing"] and hhar_studies(doc["missing"]) == []
    assert {c["dataset"] for c in doc["comparisons"] if c["table"] in ("heterogeneous", "deep")} == {"wesad"}
    out = cli_ok("report", "--params", p, "--assess-dir", assess, "--ttest", ttest, "--out-dir",
                 str(tmp_path / "reports"), "--allow-missing", *_elsewhere(tmp_path))
    assert hhar_studies(" ".join(out.split()).replace(",", " ").split()) == []
    tables = tmp_path / "reports" / "tables"
    md = (tables / "heterogeneous.md").read_text()
    assert "| WESAD | 25% |" in md and "| HHAR |" not in md
    deep = (tables / "deep.md").read_text()  # one dataset: no dataset column, the title names it
    assert deep.startswith("# deep: Deep vs shallow reservoirs") and deep.splitlines()[0].endswith("(WESAD)")
    assert "| 25% |" in deep and "HHAR" not in deep
    plot = (tmp_path / "reports" / "plots" / "heterogeneous-alpha.csv").read_text()
    assert plot.splitlines()[0] == "alpha,wesad_25,wesad_100"


# ---------------------------------------------------------------- predict: the heterogeneous models
def _predict(built: Path, method: str, out: Path, **kw):
    from esnfed_stages.experiment import predict as predict_stage

    return predict_stage.run(built / "runs" / "models" / "wesad" / method / "100" / "seed-0.json",
                             built / "data" / "processed" / "wesad", out, users=TEST, data_dir=built / "data", **kw)


def test_predict_applies_the_ensemble_and_each_client_as_assess_scores_them(built, tmp_path):
    """The ensemble's predictions on the test users score assess's test accuracy, exactly (its
    clients combined by the model's heterogeneity.combine, batch by batch as ensemble_counts); local
    and align through client c score that client's test accuracy in assess."""
    ensemble = _assess(built, "ensemble")["pcts"]["100"]
    s = _predict(built, "ensemble", tmp_path / "e.csv")
    assert s.accuracy == ensemble["test_accuracy"][0] and s.client is None
    for method in ("local", "align-0.5"):
        clients = _assess(built, method)["pcts"]["100"]["client_test_accuracy"][0]
        assert len(clients) == 4
        for c, reported in enumerate(clients):
            assert _predict(built, method, tmp_path / f"{method}-{c}.csv", client=c).accuracy == reported


@pytest.mark.parametrize("method, args, message", [
    ("local", [], "local keeps a reservoir and readout per client: give --client, one of 0..3"),
    ("align-0.5", ["--client", "4"], "align-0.5 keeps a reservoir and readout per client: give --client, one of "
                                     "0..3 (got 4)"),
    ("ensemble", ["--client", "0"], "client: the ensemble predicts with every client; local and align apply one"),
    ("incfed", ["--client", "0"], "client: incfed has no model per client (local and align have)"),
    ("ensemble", ["--context", "0"], "context: not a continual model, it has no model per context"),
])
def test_predict_names_the_client_option_a_heterogeneous_model_needs(built, tmp_path, method, args, message):
    model = built / "runs" / "models" / "wesad" / method / "100" / "seed-0.json"
    out = tmp_path / "p.csv"
    res = runner.invoke(app, ["predict", str(model), str(built / "data" / "processed" / "wesad"), *args, "--out",
                              str(out), "--data-dir", str(built / "data")])
    assert res.exit_code == 1 and not out.exists()
    assert " ".join(res.output.split()) == f"error: {model}: {message}"

"""Three report additions on fake inputs with known numbers: the selected hyperparameters
(reports/tables/selected.md/.csv from every best.json), the agreement of each paper table with the
published values (a `delta` per cell, the published mark, one line on the significance pattern) and
the papers' claims across tables (claims.md/.csv from reports/ttest.json's ``claims``)."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
import scipy.stats
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.method import Method
from esnfed_stages.report.cells import Cell, significance_agreement
from esnfed_stages.report.table_specs import TableSpec, required_inputs, table_spec, table_specs
from esnfed_core.vocabulary import PCTS
from esnfed_stages.report.selected_report import methods
from esnfed_stages.report.tables import render_agreement
from figure_stub import title_only_figures
from test_report import HIGH, LOW, SCORES, WIDE, write_assess

runner = CliRunner()

PARAMS = ("ttest:\n  variant: welch\n  alpha: 0.05\nreport:\n  activation_pct: \"100\"\n"
          "plasticity:\n  mu: 0.0\n  eta: 0.01\n  batch_size: 100\n  normalize_step: true\nretrain:\n  lambda: select\n")
VALUES = {"units": 20, "spectral_radius": 0.9, "leak": 0.45, "input_scaling": 0.75, "sigma": 0.3, "rounds": 6,
          "local_epochs": 3, "budget": 2, "layers": 2}
RETRAIN_LAMBDAS = [1e-5, 0.1, 1e-5]  # wesad fedip's, per retrain (the assess file's `lambda`)
MISSING = ("hhar", "deep-fedip", "75")  # the one best.json left out (--allow-missing)


def _config(method: str) -> dict:
    m = Method.parse(method)
    return {**{k: VALUES[k] for k in m.config_keys}, "lambda": 1e-5 if m.continual else 1e-3}


def write_selections(root: Path, skip: tuple[str, str, str] | None = None) -> None:
    """A best.json per (dataset, method, share) of the tables (random aside): score 0.5 + pct/1000."""
    for ds, method in methods(required_inputs(table_specs())):
        for pct in PCTS:
            if (ds, method, pct) == skip:
                continue
            path = root / "runs" / "select" / ds / method / pct / "best.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"dataset": ds, "method": method, "pct": pct, "trial": 1, "seed": 123,
                                        "score": 0.5 + int(pct) / 1000, "config": _config(method), "n_trials": 3}))


def _edit_assess(root: Path, ds: str, method: str, edit) -> None:
    path = root / "runs" / "assess" / ds / f"{method}.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _project(root: Path) -> None:
    (root / "params.yaml").write_text(PARAMS)
    write_assess(root)
    for ds, method in required_inputs(table_specs()):  # the retrained configs: best.json's
        _edit_assess(root, ds, method, lambda d, m=method: [e.update(config={k: v for k, v in _config(m).items()
                                                                            if k != "lambda"}) for e in d["pcts"].values()])
    _edit_assess(root, "wesad", "fedip", lambda d: d["pcts"]["25"].update(**{"lambda": RETRAIN_LAMBDAS}))


def _ok(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("additions")
    _project(root)
    write_selections(root, skip=MISSING)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("SOURCE_DATE_EPOCH", "1700000000")
        title_only_figures(mp)  # the tests read tables only
        _ok(["ttest"])
        _ok(["report", "--allow-missing"])
    return root / "reports" / "tables"


@pytest.fixture
def workdir(tmp_path, monkeypatch, title_only_figures):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _project(tmp_path)
    return tmp_path


# ---------------------------------------------------------------- 1. selected hyperparameters
def test_selected_csv_holds_each_share_s_config_score_and_lambdas(built):
    rows = _rows(built / "selected.csv")
    listed = {(r["dataset"], r["method"]) for r in rows}
    assert ("wesad", "random") not in listed and ("wesad", "fedip") in listed and ("hhar", "clip-joint") in listed
    assert len(rows) == 4 * len(methods(required_inputs(table_specs())))
    by = {(r["dataset"], r["method"], r["pct"]): r for r in rows}
    fedip = by[("wesad", "fedip", "25")]
    assert {k: fedip[k] for k in ("units", "spectral_radius", "leak", "input_scaling", "sigma", "rounds",
                                  "local_epochs", "budget", "layers")} == {
        "units": "20", "spectral_radius": "0.9", "leak": "0.45", "input_scaling": "0.75", "sigma": "0.3",
        "rounds": "6", "local_epochs": "3", "budget": "", "layers": ""}
    assert (fedip["mu"], fedip["eta"]) == ("0.0", "0.01")  # params.yaml plasticity: IP methods only
    assert (fedip["lambda_selection"], fedip["lambda_retrains"], fedip["lambda_rule"]) == ("0.001", "1e-05;0.1;1e-05",
                                                                                          "validation")
    assert float(fedip["validation_score"]) == pytest.approx(52.5) and (fedip["trial"], fedip["n_trials"]) == ("1", "3")
    ridge = by[("hhar", "ridge", "100")]
    assert (ridge["mu"], ridge["sigma"], ridge["lambda_retrains"]) == ("", "", "")  # not IP; no λ in the assess file
    replay = by[("hhar", "clip-replay", "50")]
    assert (replay["budget"], replay["rounds"], replay["lambda_selection"], replay["lambda_rule"]) == (
        "2", "", "1e-05", "fixed")
    assert by[("wesad", "deep-fedip", "25")]["layers"] == "2"
    missing = by[MISSING]
    assert missing["units"] == "" and missing["validation_score"] == ""


def test_selected_markdown_a_table_per_dataset_and_what_each_column_is(built):
    md = (built / "selected.md").read_text()
    assert md.startswith("# selected: The selected hyperparameters per dataset, method and share\n")
    assert "\n## WESAD\n" in md and "\n## HHAR\n" in md and md.index("## WESAD") < md.index("## HHAR")
    assert "μ = 0, η = 0.01 for every IP method" in md
    assert "retrain.lambda: select" in md and "continual.lambda, fixed" in md
    assert ("| fedip | 25% | 20 | 0.9 | 0.45 | 0.75 | — | 0.3 | 6 | 3 | — | 0.001 | 1e-05, 0.1, 1e-05 | 52.50 "
            "| 1 (of 3) |") in md
    assert "| clip-joint | 100% | 20 | 0.9 | 0.45 | 0.75 | — | 0.3 | — | — | — | 1e-05 | n/a | 60.00 | 1 (of 3) |" in md
    assert "| deep-fedip | 75% | n/a |" in md  # the missing best.json, listed in the header
    assert "Missing inputs (n/a rows): runs/select/hhar/deep-fedip/75/best.json" in md
    index = (built.parent / "README.md").read_text()
    assert "| [selected.md](tables/selected.md) | The selected hyperparameters per dataset, method and share " \
        "| [selected.csv](tables/selected.csv) |" in index


def test_a_missing_best_json_names_it_and_the_select_to_run(workdir):
    write_selections(workdir, skip=("wesad", "ip", "50"))
    _ok(["ttest"])
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: runs/select/wesad/ip/50/best.json: not found: run "
                                     "`esnfed select --dataset wesad --algo ip --pct 50` first")
    assert not (workdir / "reports" / "tables").exists()  # nothing partial


@pytest.mark.parametrize("edit, message", [
    (lambda b: b.update(score=1.5), "runs/select/hhar/incfed/25/best.json: score: expected the validation score, "
                                    "a fraction in [0, 1], got 1.5"),
    (lambda b: b["config"].update(units=0), "runs/select/hhar/incfed/25/best.json: config.units: must be >= 1, got 0"),
    (lambda b: b["config"].update(leak=0.6), "runs/assess/hhar/incfed.json: pcts.25.config.leak is 0.45 but "
                                             "runs/select/hhar/incfed/25/best.json selected 0.6: rerun "
                                             "`esnfed retrain --dataset hhar --algo incfed` and assess"),
])
def test_a_bad_or_stale_best_json_is_one_line_naming_it(workdir, edit, message):
    write_selections(workdir)
    path = workdir / "runs" / "select" / "hhar" / "incfed" / "25" / "best.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    _ok(["ttest"])
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: {message}"
    assert not (workdir / "reports" / "tables").exists()  # nothing partial


def test_a_select_dir_named_but_absent_is_a_usage_error_and_the_default_absent_leaves_the_table_out(workdir):
    _ok(["ttest"])
    result = runner.invoke(app, ["report", "--select-dir", "nowhere"])
    assert result.exit_code == 2 and "nowhere: not found" in " ".join(result.output.split())
    _ok(["report"])  # no runs/select here: the stage did not run, no selected table
    assert not (workdir / "reports" / "tables" / "selected.md").exists()


# ---------------------------------------------------------------- 2. agreement with the papers
def test_csv_has_the_difference_to_the_published_mean_and_its_mark(built):
    rows = _rows(built / "fedip.csv")
    assert list(rows[0])[-2:] == ["published_mark", "delta"]
    r = next(r for r in rows if (r["dataset"], r["pct"], r["method"]) == ("wesad", "25", "fedip"))
    assert r["published_mark"] == "bold"
    # ours: mean of HIGH x 100 = 80.00; published 78.68 (paper_results.yaml): 1.32 points above
    assert float(r["delta"]) == pytest.approx(statistics.fmean(HIGH) * 100 - 78.68, abs=1e-9)
    r = next(r for r in rows if (r["dataset"], r["pct"], r["method"]) == ("hhar", "50", "incfed"))
    assert r["published_mark"] == "italic" and float(r["delta"]) == pytest.approx(statistics.fmean(LOW) * 100 - 63.88)
    deep = _rows(built / "deep.csv")  # no published values: both empty
    assert {(r["published_mark"], r["delta"]) for r in deep} == {("", "")}


def test_each_paper_table_states_its_agreement_with_the_paper(built):
    md = (built / "fedip.md").read_text()
    assert "\n## Difference to the paper\n" in md
    assert "| 25% | -1.09 | +1.32 | +13.92 | +10.17 |" in md  # 71-72.09, 80-78.68, 71-57.08, 80-69.83
    # FedIP (HIGH) is significantly above IncFed (LOW) everywhere: bold. The paper marks FedIP bold
    # on WESAD and HHAR 25%, both italic on HHAR 50-100%: those three rows disagree.
    line = next(l for l in md.splitlines() if l.startswith("**Agreement with the paper**"))
    assert line.startswith("**Agreement with the paper** (not expected to agree: this run is not the papers' "
                           "protocol, see the header, so a disagreement is not a failed reproduction): Significance")
    assert ("agrees with the paper's in 5 of 8 rows; disagrees in: HHAR 50% (ours: without-fedip, **with-fedip**; "
            "paper: *without-fedip*, *with-fedip*); HHAR 75% (ours: without-fedip, **with-fedip**; paper: "
            "*without-fedip*, *with-fedip*); HHAR 100%") in line
    # Table 4 marks nothing: the pattern is which method has the higher mean (ours: IP, 80 > 71)
    ip = next(l for l in (built / "ip-centralized.md").read_text().splitlines() if l.startswith("**Agreement"))
    assert ("The paper marks no significance in this table, so the pattern compared is which tested method has "
            "the highest mean: agrees with the paper's in 5 of 8 rows; disagrees in: WESAD 100% (ours: with-ip; "
            "paper: without-ip); HHAR 75% (ours: with-ip; paper: without-ip); HHAR 100% (ours: with-ip; paper: "
            "without-ip).") in ip
    assert "Agreement" not in (built / "deep.md").read_text()  # no paper, nothing to agree with


def _cells(spec: TableSpec, ours: dict, paper: dict) -> list[Cell]:
    """Every cell of a one-dataset table, 70 ± 1 ours and the paper's, with these test-column marks."""
    return [Cell(spec.id, "wesad", pct, m, label, col, 3, 70.0, 1.0, None, ours.get(m, "") if col == "test" else "",
                 70.0, 1.0, paper.get(m, "") if col == "test" else "")
            for pct in PCTS for m, label in spec.methods for col in spec.columns]


def test_agreement_compares_only_the_tested_methods_and_says_when_the_run_is_the_papers():
    spec = table_spec("ijcnn-wesad")  # the paper marks centralised too; only IncFed vs FedAvg is tested
    cells = _cells(spec, {"incfed": "bold"}, {"incfed": "bold", "ridge": "bold"})
    rows = significance_agreement(spec, cells)
    assert len(rows) == 4 and all(r.agrees for r in rows)
    assert rows[0].ours == (("fedavg", ""), ("incfed", "bold"))
    text = render_agreement(spec, cells, comparable=True)
    assert "**Agreement with the paper**: Significance pattern" in text and "not expected" not in text
    assert text.rstrip().endswith("agrees with the paper's in 4 of 4 rows.")
    none = [Cell(**{**c.__dict__, "mean": None}) if c.pct == "50" else c for c in cells]
    assert render_agreement(spec, none, comparable=True).rstrip().endswith(
        "agrees with the paper's in 3 of 3 rows; not compared (n/a cells): WESAD 50%.")


# ---------------------------------------------------------------- 3. claims across tables
def test_claims_markdown_and_csv(built):
    md = (built / "claims.md").read_text()
    assert md.startswith("# claims: The papers' claims across their tables, tested on this run's retrains\n")
    assert "**Not comparable with the published values:** this run used the embedded synthetic data" in md
    assert "variance claims: Brown–Forsythe test (scipy.stats.levene, center='median')" in md
    # ip (WIDE) against ridge (LOW): IP's spread is the larger, so "IP mitigates the variance" fails
    assert "## ip-variance: ESANN 2022, Sec. 4 (Table 2); Decentralized Plasticity, Sec. 2.1" in md
    p = scipy.stats.levene(WIDE, LOW, center="median").pvalue
    verdict = "holds in 0 of 8 tested rows; fails in: WESAD 25%, WESAD 50%, WESAD 75%, WESAD 100%, HHAR 25%"
    assert verdict in md
    rows = _rows(built / "claims.csv")
    r = next(r for r in rows if (r["claim"], r["dataset"], r["pct"]) == ("ip-variance", "wesad", "25"))
    assert float(r["p_value"]) == pytest.approx(p, rel=1e-12) and r["test"] == "brown-forsythe"
    assert float(r["std_a"]) == pytest.approx(statistics.pstdev(WIDE) * 100) and r["verdict"] == "fails"
    # FedCLIP-replay (LOW) against CLIP-replay (WIDE): fails where Welch finds it significantly lower
    welch = scipy.stats.ttest_ind(SCORES["fedclip-replay"], SCORES["clip-replay"], equal_var=False).pvalue
    r = next(r for r in rows if (r["claim"], r["dataset"], r["pct"], r["a"]) ==
             ("federated-continual", "hhar", "75", "fedclip-replay"))
    assert float(r["p_value"]) == pytest.approx(welch) and r["verdict"] == ("fails" if welch <= 0.05 else "holds")
    assert {r["claim"] for r in rows} == {"federated-stationary", "federated-continual", "ip-variance",
                                          "fedip-variance", "fedip-variance-esann"}


def test_report_refuses_a_ttest_file_of_another_variance_test(workdir):
    _ok(["ttest", "--variance-test", "levene"])
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: reports/ttest.json: computed with variance_test 'levene' but "
                                     "params.yaml's ttest.variance_test is 'brown-forsythe': rerun `esnfed ttest`")


def test_a_ttest_file_without_claims_is_rendered_with_a_note_and_a_bad_claim_is_refused(workdir):
    _ok(["ttest"])
    path = workdir / "reports" / "ttest.json"
    doc = json.loads(path.read_text())
    bad = {**doc, "claims": [{**doc["claims"][0], "p": 2.0}]}
    path.write_text(json.dumps(bad))
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: reports/ttest.json: claims[0].p: expected a probability in [0, 1], got "
                                     "2.0 (rerun `esnfed ttest`)")
    del doc["claims"]
    path.write_text(json.dumps(doc))
    _ok(["report"])
    md = (workdir / "reports" / "tables" / "claims.md").read_text()
    assert "reports/ttest.json holds no claims (written before they were tested): rerun `esnfed ttest`" in md


def test_the_new_tables_are_byte_identical_on_a_rerun(workdir):
    write_selections(workdir)
    _ok(["ttest"])
    _ok(["report"])
    tables = workdir / "reports" / "tables"
    names = ("selected.md", "selected.csv", "claims.md", "claims.csv", "fedip.md", "fedip.csv")
    first = {n: (tables / n).read_bytes() for n in names}
    _ok(["ttest"])
    _ok(["report"])
    assert {n: (tables / n).read_bytes() for n in names} == first


def test_a_claim_no_row_of_which_could_be_tested_says_so():
    from esnfed_stages.report.claims import claim
    from esnfed_stages.report.claims_report import summary

    rows = [{"dataset": "wesad", "pct": p, "a": "ip", "b": "ridge", "verdict": "untested"} for p in PCTS]
    assert summary(claim("ip-variance"), rows) == "untested in all 4 rows (fewer scores than the test needs)"
    rows[1]["verdict"] = "fails"
    assert summary(claim("ip-variance"), rows) == ("holds in 0 of 1 tested rows; fails in: WESAD 50%; untested in 3 "
                                                   "(fewer scores than the test needs): WESAD 25%, WESAD 75%, WESAD 100%")


def test_help_names_the_new_options():
    assert "--variance-test" in runner.invoke(app, ["ttest", "--help"], env={"COLUMNS": "200"}).output
    assert "--select-dir" in runner.invoke(app, ["report", "--help"], env={"COLUMNS": "200"}).output

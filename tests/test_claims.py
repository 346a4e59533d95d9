"""The papers' claims across tables (esnfed_stages.report.claims.CLAIMS) and their tests in the `ttest`
stage: federated against centralised with the tables' t-test, the spread of the retrains with a
test of equal variances, on synthetic retrain scores whose answers are known; the stage's output
deterministic and written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import scipy.stats
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_stages.report.claims import CLAIMS, LOWER_VARIANCE, NOT_LOWER_VARIANCE, claim, claim_specs, claim_verdict
from esnfed_stages.report.table_specs import table_specs
from test_report import SCORES, write_assess

runner = CliRunner()

# Five retrains each: a variance test needs at least three.
CENTRAL = [0.780, 0.790, 0.785, 0.775, 0.795]          # mean 0.785, std 0.0071
EQUAL = [0.781, 0.789, 0.786, 0.776, 0.793]            # the same mean within noise: not significant
MUCH_LOWER = [0.600, 0.605, 0.610, 0.595, 0.590]       # 18 points below: significant, worse
NARROW = [0.7850, 0.7852, 0.7848, 0.7851, 0.7849]      # the same mean, 50x narrower spread
WIDE = [0.70, 0.87, 0.74, 0.83, 0.785]                 # the same mean, 10x wider spread


def _scores(**by_method):
    """SCORES with the given methods' retrain scores (five each), the others padded to five."""
    out = {m: (list(v) + [v[-1]] * 5)[:5] for m, v in SCORES.items()}
    out.update(by_method)
    return out


def _run_ttest(root: Path, scores: dict, *args: str) -> dict:
    (root / "params.yaml").write_text("ttest:\n  variant: welch\n  alpha: 0.05\n  variance_test: brown-forsythe\n"
                                      "report:\n  activation_pct: \"100\"\n")
    write_assess(root, scores=scores)
    result = runner.invoke(app, ["ttest", *args])
    assert result.exit_code == 0, result.output
    return json.loads((root / "reports" / "ttest.json").read_text())


def _claim_rows(doc: dict, claim_id: str) -> list[dict]:
    return [r for r in doc["claims"] if r["claim"] == claim_id]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_claims_name_their_pairs_and_tables():
    ids = {c.id for c in CLAIMS}
    assert ids == {"federated-stationary", "federated-continual", "ip-variance", "fedip-variance",
                   "fedip-variance-esann"}
    assert claim("federated-stationary").pairs == (("fedip", "ip"),)
    assert claim("federated-continual").pairs == tuple((f"fedclip-{s}", f"clip-{s}") for s in ("naive", "replay", "joint"))
    assert claim("ip-variance").pairs == (("ip", "ridge"),) and claim("ip-variance").expect == LOWER_VARIANCE
    # the two papers say opposite things of FedIP's spread: both are tested, on the same pair
    assert claim("fedip-variance").pairs == claim("fedip-variance-esann").pairs == (("fedip", "incfed"),)
    assert claim("fedip-variance-esann").expect == NOT_LOWER_VARIANCE
    # a claim is tested where the tables it compares are rendered: the papers' datasets declared
    assert claim_specs(table_specs()) == CLAIMS
    assert claim_specs(table_specs(("example",), ("example",))) == ()


@pytest.mark.parametrize("record,verdicts", [
    # a significantly lower mean fails "comparable, if not greater"; a higher or not significant one holds
    ({"mean_a": 0.6, "mean_b": 0.8, "std_a": 0.01, "std_b": 0.01, "p": 0.001, "significant": True},
     {"federated-stationary": "fails", "ip-variance": "fails", "fedip-variance-esann": "holds"}),
    ({"mean_a": 0.9, "mean_b": 0.8, "std_a": 0.01, "std_b": 0.05, "p": 0.001, "significant": True},
     {"federated-stationary": "holds", "ip-variance": "holds", "fedip-variance-esann": "fails"}),
    ({"mean_a": 0.7, "mean_b": 0.8, "std_a": 0.01, "std_b": 0.05, "p": 0.2, "significant": False},
     {"federated-stationary": "holds", "ip-variance": "fails", "fedip-variance-esann": "holds"}),
    ({"mean_a": 0.7, "mean_b": 0.8, "std_a": 0.01, "std_b": 0.05, "p": None, "significant": False},
     {"federated-stationary": "untested", "ip-variance": "untested", "fedip-variance-esann": "untested"}),
])
def test_claim_verdicts(record, verdicts):
    assert {c: claim_verdict(claim(c), record) for c in verdicts} == verdicts


def test_federated_against_centralised_with_known_answers(workdir):
    """FedIP with IP's mean (within noise) holds; FedCLIP-naive 18 points below CLIP-naive fails;
    the p of each row is scipy's Welch t-test of the two methods' scores."""
    doc = _run_ttest(workdir, _scores(fedip=EQUAL, ip=CENTRAL, **{"fedclip-naive": MUCH_LOWER, "clip-naive": CENTRAL,
                                                                  "fedclip-replay": CENTRAL, "clip-replay": EQUAL}))
    assert doc["variance_test"] == "brown-forsythe" and doc["params"]["ttest.variance_test"] == "brown-forsythe"
    stationary = _claim_rows(doc, "federated-stationary")
    assert len(stationary) == 8  # 2 datasets x 4 shares x 1 pair
    assert all((r["a"], r["b"], r["test"]) == ("fedip", "ip", "welch") for r in stationary)
    assert stationary[0]["p"] == pytest.approx(scipy.stats.ttest_ind(EQUAL, CENTRAL, equal_var=False).pvalue, rel=1e-12)
    assert all(not r["significant"] and claim_verdict(claim("federated-stationary"), r) == "holds" for r in stationary)
    continual = _claim_rows(doc, "federated-continual")
    assert len(continual) == 24  # 3 strategies
    naive = [r for r in continual if r["a"] == "fedclip-naive"]
    assert naive and all(r["significant"] and r["mean_a"] < r["mean_b"] for r in naive)
    assert {claim_verdict(claim("federated-continual"), r) for r in naive} == {"fails"}
    replay = [r for r in continual if r["a"] == "fedclip-replay"]
    assert {claim_verdict(claim("federated-continual"), r) for r in replay} == {"holds"}
    # the same t-test variant as the tables: --variant student changes every mean claim's test
    student = _run_ttest(workdir, _scores(fedip=EQUAL, ip=CENTRAL), "--variant", "student")
    row = _claim_rows(student, "federated-stationary")[0]
    assert row["test"] == "student"
    assert row["p"] == pytest.approx(scipy.stats.ttest_ind(EQUAL, CENTRAL, equal_var=True).pvalue, rel=1e-12)


def test_variance_claims_with_known_answers(workdir):
    """IP 50x narrower than ridge at the same mean: IP lowers the variance (holds); FedIP as wide as
    IncFed: neither the Decentralized Plasticity claim (lower) nor a failure of ESANN's (not lower)."""
    doc = _run_ttest(workdir, _scores(ip=NARROW, ridge=WIDE, fedip=CENTRAL, incfed=EQUAL))
    ip = _claim_rows(doc, "ip-variance")
    assert len(ip) == 8 and all(r["test"] == "brown-forsythe" for r in ip)
    assert ip[0]["p"] == pytest.approx(scipy.stats.levene(NARROW, WIDE, center="median").pvalue, rel=1e-12)
    assert ip[0]["std_a"] == pytest.approx(float(__import__("numpy").std(NARROW)))
    assert {claim_verdict(claim("ip-variance"), r) for r in ip} == {"holds"}
    assert {claim_verdict(claim("fedip-variance"), r) for r in _claim_rows(doc, "fedip-variance")} == {"fails"}
    assert {claim_verdict(claim("fedip-variance-esann"), r) for r in _claim_rows(doc, "fedip-variance-esann")} == {"holds"}
    # the reverse spread: FedIP narrow against a wide IncFed turns both FedIP verdicts round
    doc = _run_ttest(workdir, _scores(fedip=NARROW, incfed=WIDE))
    assert {claim_verdict(claim("fedip-variance"), r) for r in _claim_rows(doc, "fedip-variance")} == {"holds"}
    assert {claim_verdict(claim("fedip-variance-esann"), r) for r in _claim_rows(doc, "fedip-variance-esann")} == {"fails"}
    # Levene, the other choice, from the command line: recorded, and scipy's mean-centred p
    doc = _run_ttest(workdir, _scores(ip=NARROW, ridge=WIDE), "--variance-test", "levene")
    row = _claim_rows(doc, "ip-variance")[0]
    assert doc["variance_test"] == "levene" and row["test"] == "levene"
    assert row["p"] == pytest.approx(scipy.stats.levene(NARROW, WIDE, center="mean").pvalue, rel=1e-12)


def test_two_retrains_leave_the_variance_claims_untested(workdir):
    """The default budget retrains twice: too few for a variance test (p null), not a verdict."""
    doc = _run_ttest(workdir, {m: v[:2] for m, v in _scores().items()})
    rows = _claim_rows(doc, "ip-variance")
    assert rows and all(r["p"] is None and r["statistic"] is None for r in rows)
    assert {claim_verdict(claim("ip-variance"), r) for r in rows} == {"untested"}
    assert all(r["p"] is not None for r in _claim_rows(doc, "federated-stationary"))  # a t-test needs 2


def test_paired_claims_need_matching_seeds(workdir):
    """The mean claims use the tables' variant: paired pairs FedIP's retrain k with IP's, so the
    seeds must match, as for a table's pairs (IP and ridge still match each other: the table's
    pair passes, the claim's does not)."""
    scores = _scores(fedip=EQUAL, ip=CENTRAL)
    _run_ttest(workdir, scores)
    for method in ("ip", "ridge"):
        path = workdir / "runs" / "assess" / "wesad" / f"{method}.json"
        doc = json.loads(path.read_text())
        doc["pcts"]["25"]["seeds"] = [9, 8, 7, 6, 5]
        path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["ttest", "--variant", "paired"])
    assert result.exit_code == 1
    assert "runs/assess/wesad/ip.json: pcts.25.seeds [9, 8, 7, 6, 5] differ from runs/assess/wesad/fedip.json's" \
        in result.output


def test_ttest_output_is_deterministic_and_atomic(workdir):
    """Same inputs, same bytes; a run that fails (a bad assess file) leaves the earlier
    reports/ttest.json as it was and no temporary file beside it."""
    _run_ttest(workdir, _scores(ip=NARROW, ridge=WIDE))
    out = workdir / "reports" / "ttest.json"
    first = out.read_bytes()
    assert runner.invoke(app, ["ttest"]).exit_code == 0
    assert out.read_bytes() == first
    bad = workdir / "runs" / "assess" / "hhar" / "ridge.json"
    doc = json.loads(bad.read_text())
    doc["pcts"]["50"]["test_accuracy"] = [0.5, 1.5, 0.5, 0.5, 0.5]
    bad.write_text(json.dumps(doc))
    result = runner.invoke(app, ["ttest"])
    assert result.exit_code == 1 and "runs/assess/hhar/ridge.json: pcts.50.test_accuracy holds 1.5" in result.output
    assert out.read_bytes() == first
    assert sorted(p.name for p in out.parent.iterdir()) == ["ttest.json"]


def test_bad_variance_test_param_names_the_key(workdir):
    (workdir / "params.yaml").write_text("ttest:\n  variant: welch\n  alpha: 0.05\n  variance_test: bartlett\n")
    write_assess(workdir)
    result = runner.invoke(app, ["ttest"])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: params.yaml: ttest.variance_test: expected one of brown-forsythe, levene, "
                                     "got 'bartlett'")
    assert not (workdir / "reports" / "ttest.json").exists()

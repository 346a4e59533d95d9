"""The `ttest` and `report` stages end to end on fake assess files with known numbers
(CliRunner, in a temporary working directory): values, marks, published values, communication,
figures, determinism and the missing-input errors."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_stages.report.table_specs import TABLES, required_inputs
from esnfed_core.vocabulary import PCTS
from esnfed_stages.params.load import load_params

runner = CliRunner()

LOW = [0.70, 0.72, 0.71]
HIGH = [0.80, 0.79, 0.81]
WIDE = [0.74, 0.86, 0.78, 0.82]  # larger variance and n: Welch and Student give different p
SCORES = {"random": [0.25, 0.26, 0.24], "ridge": LOW, "incfed": LOW, "fedavg": [0.68, 0.69, 0.70],
          "ip": WIDE, "fedip": HIGH, "clip-naive": [0.3, 0.32, 0.31], "clip-replay": WIDE,
          "clip-joint": HIGH, "fedclip-naive": [0.3, 0.32, 0.31], "fedclip-replay": LOW,
          "fedclip-joint": HIGH,
          "deep-incfed": HIGH, "deep-fedip": HIGH}  # deep: better than incfed, equal to fedip
N_UNITS, N_CLASSES = {"wesad": 20, "hhar": 30}, {"wesad": 4, "hhar": 6}
CONTEXTS = {"wesad": 5, "hhar": 4}
HHAR_CONTEXTS = ["nexus4", "s3", "s3mini", "lgwatch"]
IP_ROUNDS = 6
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _communication(ds: str, method: str, clients: int) -> dict | None:
    n, c, t = N_UNITS[ds], N_CLASSES[ds], CONTEXTS[ds]
    method = method.removeprefix("deep-")  # a deep method sends as its shallow one (N = total units)
    if method == "incfed":
        up, down, rounds = clients * (n * n + n * c), clients * n * c, 1
    elif method == "fedavg":
        up = down = clients * n * c
        rounds = 1
    elif method == "fedip":
        up = clients * (2 * n * IP_ROUNDS + n * n + n * c)
        down = clients * (2 * n * IP_ROUNDS + n * c)
        rounds = IP_ROUNDS + 1
    elif method == "fedclip-joint":  # a readout after every IP round
        up = clients * IP_ROUNDS * (2 * n + n * n + n * c)
        down = clients * IP_ROUNDS * (2 * n + n * c)
        rounds = 2 * IP_ROUNDS
    elif method.startswith("fedclip"):  # a readout per context
        up = clients * (2 * n * IP_ROUNDS + t * (n * n + n * c))
        down = clients * (2 * n * IP_ROUNDS + t * n * c)
        rounds = IP_ROUNDS + t
    else:
        return None
    # As esnfed_core.trial.communication writes it: rounds summed over the ledger's algorithms.
    return {"up_floats": up, "down_floats": down, "up_bytes": 8 * up + 8 * clients,
            "down_bytes": 8 * down, "rounds": rounds, "clients": clients}


def _entry(ds: str, method: str, pct: str, scores: dict | None = None) -> dict:
    test = (scores or SCORES)[method]
    continual = "clip" in method
    edges = np.linspace(-1, 1, 9)
    return {
        "seeds": list(range(len(test))),
        "test_accuracy": test,
        "train_accuracy": [min(1.0, v + 0.1) for v in test] if method in
        ("random", "ridge", "fedavg", "incfed") else None,
        "stream_accuracy": [list(np.linspace(0.9, v, CONTEXTS[ds])) for v in test]
        if continual else None,
        "accuracy_matrix": None,
        "communication": _communication(ds, method, clients=int(pct) // 25 + 1),
        "config": {"units": N_UNITS[ds], "rounds": IP_ROUNDS},
        "activation": _activation(len(test), CONTEXTS[ds] if continual else 1, CONTEXTS[ds], edges)
        if ds == "wesad" and "ip" in method else None,
    }


TEST_USERS = ["S4", "S6", "S10"]


def _activation(retrains: int, models: int, contexts: int, edges: np.ndarray) -> dict:
    """Densities 0.5 + 0.1·context (+ 0.01·user per user) with a ± spread over retrains whose
    mean is 0: the mean over retrains is known exactly."""
    bins = len(edges) - 1

    def value(r, t, extra=0.0):
        return 0.5 + 0.1 * t + extra + 0.02 * (r - (retrains - 1) / 2)

    return {"edges": edges.tolist(), "users": TEST_USERS,
            "models": "after_each_context" if models > 1 else "final",
            "density": [[[[value(r, t)] * bins for t in range(contexts)] for _ in range(models)]
                        for r in range(retrains)],
            "user_density": [[[[[value(r, t, 0.01 * u)] * bins for t in range(contexts)]
                               for u in range(len(TEST_USERS))] for _ in range(models)]
                             for r in range(retrains)]}


def write_assess(root: Path, skip: tuple[str, str] | None = None, scores: dict | None = None) -> None:
    """Every assess file the tables need, with ``scores`` (default SCORES) as each method's test scores."""
    for ds, method in required_inputs():
        if (ds, method) == skip:
            continue
        doc = {"dataset": ds, "method": method, "algo": method.split("-")[0],
               "strategy": method.split("-")[1] if "-" in method else None, "budget": "default",
               "source": "synthetic", "pcts": {p: _entry(ds, method, p, scores) for p in PCTS}}
        path = root / "runs" / "assess" / ds / f"{method}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))


PARAMS = "ttest:\n  variant: welch\n  alpha: 0.05\nreport:\n  activation_pct: \"100\"\n"


@pytest.fixture
def rendering_workdir(tmp_path, monkeypatch):
    """A folder with PARAMS as params.yaml, the current folder, at a fixed SOURCE_DATE_EPOCH."""
    (tmp_path / "params.yaml").write_text(PARAMS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14
    return tmp_path


@pytest.fixture
def workdir(rendering_workdir, title_only_figures):
    """rendering_workdir with title-only figures: the tests that take it check tables, plots'
    CSVs, the index and refusals; `built` and the determinism test render the figures."""
    return rendering_workdir


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One complete ttest + report run, shared by the tests that only read its outputs."""
    root = tmp_path_factory.mktemp("report")
    (root / "params.yaml").write_text(PARAMS)
    write_assess(root)
    # HHAR's partition names its contexts (the figures and plots show them); WESAD has none here
    (root / "data" / "partitions").mkdir(parents=True)
    (root / "data" / "partitions" / "hhar.json").write_text(json.dumps({"context_names": HHAR_CONTEXTS}))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("SOURCE_DATE_EPOCH", "1700000000")
        _ok(["ttest"])
        summary = _ok(["report"]).output
    return root, summary


def _ok(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + (result.stderr or "")
    return result


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_ttest_records_variant_and_scipy_p(workdir):
    write_assess(workdir)
    _ok(["ttest"])
    doc = json.loads((workdir / "reports" / "ttest.json").read_text())
    assert doc["variant"] == "welch" and doc["alpha"] == 0.05
    # what it was computed with, by params.yaml key: the report compares them with params.yaml's
    assert doc["params"] == {"ttest.variant": "welch", "ttest.alpha": 0.05, "ttest.variance_test": "brown-forsythe",
                             "datasets": ["wesad", "hhar"], "continual_datasets": ["wesad", "hhar"],
                             "study_datasets": ["wesad", "hhar"]}
    comp = next(c for c in doc["comparisons"] if c["table"] == "ip-centralized"
                and c["dataset"] == "wesad" and c["pct"] == "25")
    assert (comp["a"], comp["b"]) == ("ip", "ridge")
    welch = scipy.stats.ttest_ind(WIDE, LOW, equal_var=False).pvalue
    assert comp["p"] == pytest.approx(welch, rel=1e-12)

    _ok(["ttest", "--variant", "student"])
    doc = json.loads((workdir / "reports" / "ttest.json").read_text())
    assert doc["variant"] == "student" and doc["params"]["ttest.variant"] == "student"  # the command line's
    comp = next(c for c in doc["comparisons"] if c["table"] == "ip-centralized"
                and c["dataset"] == "wesad" and c["pct"] == "25")
    student = scipy.stats.ttest_ind(WIDE, LOW, equal_var=True).pvalue
    assert comp["p"] == pytest.approx(student, rel=1e-12)
    assert student != pytest.approx(welch, rel=1e-3)


def test_ttest_groups_per_table(workdir):
    write_assess(workdir)
    _ok(["ttest"])
    comps = json.loads((workdir / "reports" / "ttest.json").read_text())["comparisons"]
    # The pairs each paper compares, per (dataset, pct): 1 (proposed vs its baseline); the
    # continual tables 2 (replay vs naive, replay vs joint); IncFed tables 1 (IncFed vs FedAvg,
    # test column only).
    expected = {"esann": 8, "fedip": 8, "ip-centralized": 8, "fedclip": 16,
                "clip-centralized": 16, "ijcnn-wesad": 4, "ijcnn-hhar": 4, "deep": 16}
    assert {t: sum(c["table"] == t for c in comps) for t in expected} == expected
    fedclip = [c for c in comps if c["table"] == "fedclip"]
    assert {(c["a"], c["b"]) for c in fedclip} == {("fedclip-replay", "fedclip-naive"),
                                                   ("fedclip-replay", "fedclip-joint")}
    ijcnn = [c for c in comps if c["table"] == "ijcnn-wesad"]
    assert {(c["a"], c["b"], c["column"]) for c in ijcnn} == {("incfed", "fedavg", "test")}


def test_report_tables(built):
    workdir, summary = built
    assert "without vs with FedIP" in summary  # the summary table
    tables = workdir / "reports" / "tables"
    for spec in TABLES:
        assert (tables / f"{spec.id}.md").stat().st_size > 0
        assert (tables / f"{spec.id}.csv").stat().st_size > 0
    md = (tables / "fedip.md").read_text()
    for line in ("Data source: synthetic", "budget: default", "seeds [0, 1, 2]",
                 "Welch t-test", "two-sided", "pairs the paper compares (proposed vs baseline): "
                 "with-fedip vs without-fedip", "Date: 2023-11-14", "scipy "):
        assert line in md
    low = f"{statistics.fmean(LOW) * 100:.2f} ± {statistics.pstdev(LOW) * 100:.2f}"
    high = f"{statistics.fmean(HIGH) * 100:.2f} ± {statistics.pstdev(HIGH) * 100:.2f}"
    assert f"| 25% | {low} | 72.09 ± 0.59 | **{high}** | **78.68 ± 0.12** |" in md
    assert "not directly comparable" in (tables / "esann.md").read_text()
    assert "not directly comparable" in (tables / "ijcnn-wesad.md").read_text()
    assert "not directly comparable" not in md
    # reader audit: every paper table says the run is not the papers' protocol (fake files:
    # synthetic, budget default; this params.yaml names no budgets, so no scale)
    for spec in TABLES:
        text = (tables / f"{spec.id}.md").read_text()
        flagged = ("- **Not comparable with the published values:** this run used the embedded synthetic "
                   "data (data.source: synthetic), not the real recordings, and budget `default`, not the "
                   "papers' protocol (budget `paper`, PROTOCOL §6). The 'paper' columns are the published "
                   "values, shown for reference, not a target for this run") in text
        assert flagged == spec.has_published, spec.id
    assert "Not comparable" not in (tables / "communication.md").read_text()


def test_report_marks_follow_independent_tests(built):
    workdir = built[0]
    rows = _rows(workdir / "reports" / "tables" / "clip-centralized.csv")
    by = {r["method"]: r for r in rows if r["dataset"] == "hhar" and r["pct"] == "50"}
    # Pairs tested: replay (the proposed) vs naive and vs joint. joint (HIGH) and replay (WIDE)
    # are not significantly different; naive is far below replay.
    p_joint = scipy.stats.ttest_ind(WIDE, HIGH, equal_var=False).pvalue
    p_naive = scipy.stats.ttest_ind(WIDE, SCORES["clip-naive"], equal_var=False).pvalue
    assert p_joint > 0.05 and p_naive <= 0.05
    assert {m: by[m]["mark"] for m in by} == {"clip-joint": "italic", "clip-replay": "italic",
                                              "clip-naive": ""}
    assert float(by["clip-joint"]["p_value"]) == pytest.approx(p_joint)
    assert float(by["clip-naive"]["p_value"]) == pytest.approx(p_naive)
    assert float(by["clip-replay"]["p_value"]) == pytest.approx(max(p_joint, p_naive))
    assert by["clip-joint"]["n"] == "3"
    assert float(by["clip-joint"]["std"]) == pytest.approx(statistics.pstdev(HIGH) * 100)


def test_published_values_match_package_yaml(built):
    workdir = built[0]
    text = resources.files("esnfed_stages.report").joinpath("paper_results.yaml").read_text()
    doc = yaml.safe_load(text)
    checked = 0
    for spec in TABLES:
        if not spec.has_published:  # the project's own tables (deep) have no published values
            assert spec.id not in doc
            continue
        pub = doc[spec.id]
        for r in _rows(workdir / "reports" / "tables" / f"{spec.id}.csv"):
            label = dict(spec.methods)[r["method"]]
            name = spec.published_column(r["dataset"], label, r["column"])
            mean, std, _ = pub["rows"][int(r["pct"])][pub["columns"].index(name)]
            assert float(r["published_mean"]) == mean
            assert (r["published_std"] == "") if std is None else float(r["published_std"]) == std
            checked += 1
    assert checked == sum(4 * len(s.datasets) * len(s.methods) * len(s.columns) for s in TABLES
                          if s.has_published)


def test_communication_table(built):
    workdir = built[0]
    rows = _rows(workdir / "reports" / "tables" / "communication.csv")
    assert len(rows) == 2 * 4 * 8  # 6 federated methods of the papers + deep-incfed, deep-fedip
    assert {r["match"] for r in rows} == {"yes"}
    r = next(r for r in rows if r["dataset"] == "hhar" and r["pct"] == "50"
             and r["method"] == "incfed")
    n, c, k = 30, 6, 3
    assert int(r["up_floats"]) == k * (n * n + n * c) and int(r["down_floats"]) == k * n * c
    assert float(r["up_floats_per_client_round"]) == n * n + n * c
    assert float(r["up_bytes_per_client_round"]) == 8 * (n * n + n * c) + 8
    fip = next(r for r in rows if r["dataset"] == "wesad" and r["pct"] == "100"
               and r["method"] == "fedip")
    assert int(fip["analytic_down_floats"]) == 5 * (2 * 20 * IP_ROUNDS + 20 * 4)
    md = (workdir / "reports" / "tables" / "communication.md").read_text()
    # the dataset's display name, as every other table's rows; the CSV keeps its id
    assert "N²+N·C" in md and "| HHAR | 50% | incfed | 30 | 6 | 3 | 1 |" in md
    joint = next(r for r in rows if r["dataset"] == "hhar" and r["pct"] == "25"
                 and r["method"] == "fedclip-joint")
    assert (joint["ip_rounds"], joint["readouts"]) == (str(IP_ROUNDS), str(IP_ROUNDS))


def test_deep_table_marks_each_pair_and_has_no_paper_column(built):
    """Deep reservoirs: reports/tables/deep.md/.csv, shallow vs deep within IncFed and within FedIP,
    each pair marked on its own (deep-incfed beats incfed: bold; deep-fedip = fedip: both
    italic); no published values, so no paper column."""
    workdir = built[0]
    rows = _rows(workdir / "reports" / "tables" / "deep.csv")
    marks = {(r["dataset"], r["pct"], r["method"]): r["mark"] for r in rows}
    assert len(rows) == 2 * 4 * 4
    for ds in ("wesad", "hhar"):
        for pct in PCTS:
            assert marks[(ds, pct, "deep-incfed")] == "bold" and marks[(ds, pct, "incfed")] == ""
            assert marks[(ds, pct, "deep-fedip")] == marks[(ds, pct, "fedip")] == "italic"
    md = (workdir / "reports" / "tables" / "deep.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("| train users"))
    assert "paper" not in head and "WESAD deep-incfed" in head
    assert "| 25% | 71.00 ± 0.82 | **80.00 ± 0.82** | *80.00 ± 0.82* | *80.00 ± 0.82* |" in md
    comm = _rows(workdir / "reports" / "tables" / "communication.csv")
    deep = next(r for r in comm if r["dataset"] == "wesad" and r["pct"] == "100"
                and r["method"] == "deep-fedip")
    assert deep["match"] == "yes" and int(deep["analytic_down_floats"]) == 5 * (2 * 20 * IP_ROUNDS + 20 * 4)


def test_figures_and_plots(built):
    workdir = built[0]
    figs = sorted((workdir / "reports" / "figures").iterdir())
    assert [f.name for f in figs] == [
        "accuracy-matrix-hhar.png", "accuracy-matrix-wesad.png",
        "activation-wesad-centralized.png", "activation-wesad-clip-contexts.png",
        "activation-wesad-clip-shares.png", "activation-wesad-fedclip-contexts.png",
        "activation-wesad-fedclip-shares.png", "activation-wesad-federated.png",
        "activation-wesad-fedip-users.png", "activation-wesad-ip-users.png",
        "stream-hhar-centralized.png", "stream-hhar-federated.png",
        "stream-wesad-centralized.png", "stream-wesad-federated.png",
        "test-accuracy-hhar.png", "test-accuracy-wesad.png"]
    for f in figs:
        data = f.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000
    plots = sorted(p.name for p in (workdir / "reports" / "plots").iterdir())
    # a stream CSV per dataset, setting and share (a panel of the figure), a column per strategy
    assert [n for n in plots if n.startswith("stream-")] == sorted(
        f"stream-{ds}-{s}-{pct}.csv" for ds in ("wesad", "hhar") for s in ("federated", "centralized") for pct in PCTS)
    stream = _rows(workdir / "reports" / "plots" / "stream-wesad-federated-25.csv")
    assert len(stream) == CONTEXTS["wesad"] and list(stream[0]) == [
        "context", "context_name", "naive", "replay", "joint", "naive_std", "replay_std", "joint_std"]
    # contexts numbered from 0 as PROTOCOL §6 and the activation plots (context0..), named where
    # the partition file names them (HHAR's devices: its drop at context 3 is the smartwatch)
    assert [(r["context"], r["context_name"]) for r in stream] == [(str(t), "") for t in range(5)]
    hhar = _rows(workdir / "reports" / "plots" / "stream-hhar-centralized-75.csv")
    assert [(r["context"], r["context_name"]) for r in hhar] == [(str(t), n) for t, n in enumerate(HHAR_CONTEXTS)]
    assert float(stream[-1]["joint"]) == pytest.approx(statistics.fmean(HIGH) * 100)
    assert float(stream[-1]["replay"]) == pytest.approx(statistics.fmean(LOW) * 100)
    assert float(stream[-1]["replay_std"]) == pytest.approx(statistics.pstdev(LOW) * 100)  # the band
    assert float(hhar[0]["naive"]) == pytest.approx(90.0)  # every retrain's stream starts at 0.9
    act = _rows(workdir / "reports" / "plots" / "activation-wesad-fedip.csv")
    assert len(act) == 8 and float(act[0]["context4"]) == pytest.approx(0.9)  # mean over retrains
    # the test-accuracy figure's data: a row per share, each stationary method's mean and std (%)
    shares = _rows(workdir / "reports" / "plots" / "test-accuracy-hhar.csv")
    assert [r["share"] for r in shares] == list(PCTS)
    assert float(shares[0]["fedip_mean"]) == pytest.approx(statistics.fmean(HIGH) * 100)
    assert float(shares[0]["fedip_std"]) == pytest.approx(statistics.pstdev(HIGH) * 100)
    assert float(shares[3]["ip_mean"]) == pytest.approx(statistics.fmean(WIDE) * 100)
    # the accuracy matrices' data: a CSV per dataset and continual method (none assessed here: empty)
    assert [n for n in plots if n.startswith(("test-accuracy-", "accuracy-matrix-"))] == sorted(
        [f"test-accuracy-{ds}.csv" for ds in ("wesad", "hhar")]
        + [f"accuracy-matrix-{ds}-{a}-{s}.csv" for ds in ("wesad", "hhar") for a in ("clip", "fedclip")
           for s in ("naive", "replay", "joint")])


def test_the_accuracy_matrices_are_drawn_at_the_share_params_yaml_names(workdir):
    from esnfed_stages.report.figures import png_title

    write_assess(workdir)
    path = workdir / "runs" / "assess" / "hhar" / "fedclip-joint.json"
    doc = json.loads(path.read_text())
    for pct in ("50", "100"):  # the 50% matrix: 0.5 everywhere, the 100% one 0.9
        doc["pcts"][pct]["accuracy_matrix"] = [[[0.5 if pct == "50" else 0.9] * 4] * 4] * 3
    path.write_text(json.dumps(doc))
    (workdir / "params.yaml").write_text(PARAMS + "  matrix_pct: \"50\"\n")
    _ok(["ttest"])
    _ok(["report"])
    title = png_title((workdir / "reports" / "figures" / "accuracy-matrix-hhar.png").read_bytes())
    assert "on the test data of each context (columns), 50% training users" in title
    rows = _rows(workdir / "reports" / "plots" / "accuracy-matrix-hhar-fedclip-joint.csv")
    assert [[float(r[f"on_context{j}"]) for j in range(4)] for r in rows] == [[50.0] * 4] * 4
    index = (workdir / "reports" / "README.md").read_text()
    assert "accuracy matrix at 50% of the training users (params.yaml `report.matrix_pct`)" in index
    (workdir / "params.yaml").write_text(PARAMS + "  matrix_pct: \"60\"\n")
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1 and result.stderr.strip() == (
        "error: params.yaml: report.matrix_pct: expected one of 25, 50, 75, 100, got '60'")


def test_the_index_names_every_table_and_figure_with_its_title(built):
    from esnfed_stages.report.figures import png_title

    reports = built[0] / "reports"
    index = (reports / "README.md").read_text("utf-8")
    rows = {line.split("](", 1)[0][3:]: line for line in index.splitlines() if line.startswith("| [")}
    tables = sorted(p.name for p in (reports / "tables").iterdir())
    figures = sorted(p.name for p in (reports / "figures").iterdir())
    md = [t for t in tables if t.endswith(".md")]
    alone = [t for t in tables if t.endswith(".csv") and t[:-4] + ".md" not in tables]
    assert alone == ["secagg-overhead.csv"]
    # reader audit: the SecAgg+ CSV sits beside its Markdown, the section of communication.md
    section = 'communication.md, section "SecAgg+ overhead"'
    assert sorted(rows) == sorted(md + [section] + figures)
    assert {"continual-metrics.md", "ip-fit.md"} <= set(md)  # the gap audit's tables, linked as every table
    columns = (reports / "tables" / alone[0]).read_text("utf-8").split("\n", 1)[0].replace(",", ", ")
    assert rows[section] == (
        f"| [{section}](tables/communication.md#secagg-overhead-bytes-per-client-per-round-plain-against-"
        "secagg-flower) | SecAgg+ overhead: bytes per client per round, plain against SecAgg+ (Flower) "
        f"| [secagg-overhead.csv](tables/secagg-overhead.csv): the section's rows; columns: {columns} |")
    assert "\n## SecAgg+ overhead: bytes per client per round, plain against SecAgg+ (Flower)\n" in \
        (reports / "tables" / "communication.md").read_text("utf-8")
    assert "CSV only" not in index
    assert index.split("\n\n")[2].startswith("**Not comparable with the published values:**")
    for name in md:
        heading = (reports / "tables" / name).read_text("utf-8").split("\n", 1)[0]
        title = heading.split(": ", 1)[1]
        assert f"| [{name}](tables/{name}) | {title} | [{name[:-3]}.csv](tables/{name[:-3]}.csv) |" in rows[name]
    for name in figures:
        title = png_title((reports / "figures" / name).read_bytes())
        assert title and f"| [{name}](figures/{name}) | {title} |" == rows[name]
    assert png_title((reports / "figures" / "stream-wesad-federated.png").read_bytes()) == \
        "WESAD federated: stream accuracy after each context (FedCLIP; mean ± std over retrains)"
    n_metrics, n_plots = (len(list((reports / d).iterdir())) for d in ("metrics", "plots"))
    assert n_metrics > 0 and n_plots > 0
    assert f"`metrics/`: {n_metrics} JSON files" in index and f"`plots/`: {n_plots} CSV files" in index
    # reader audit: the metrics' unit, which plots DVC draws, and the activation CSVs' share
    assert "mean test accuracy per share of each dataset and method as a fraction (0–1)" in index
    assert f"`dvc plots show` draws the {n_plots} that the repository's dvc-plots/dvc.yaml declares:" in index
    assert "trained on 100% of the training users only (params.yaml `report.activation_pct`" in index


def test_metrics_deterministic_and_dated_headers_reproducible(built, tmp_path, monkeypatch, request):
    """`built`'s ttest + report rerun on a copy of its folder: the same bytes, figures included;
    at another SOURCE_DATE_EPOCH only the dated headers move."""
    workdir = tmp_path / "again"
    shutil.copytree(built[0], workdir)
    reports = workdir / "reports"
    first = {p: (reports / p).read_bytes() for p in ("metrics/wesad-fedip.json", "ttest.json",
                                                      "tables/fedclip.md", "figures/stream-hhar-federated.png")}
    metrics = json.loads(first["metrics/wesad-fedip.json"])
    assert metrics == {"test": {pct.zfill(3): round(statistics.fmean(HIGH), 6) for pct in PCTS}}
    # one small file per dataset and method (dvc metrics show: a row per file, a column per share)
    names = sorted(p.name for p in (reports / "metrics").iterdir())
    assert names == sorted(f"{ds}-{m}.json" for ds in ("wesad", "hhar") for m in SCORES)
    # DVC's own table sorts the columns as text: the shares still come in order (before: test.100 first)
    from dvc.compare import metrics_table  # noqa: PLC0415

    files = {f"reports/metrics/{n}": {"data": json.loads((reports / "metrics" / n).read_text())} for n in names}
    shown = {"workspace": {"data": files}}
    assert list(metrics_table(shown).keys()) == ["Path", "test.025", "test.050", "test.075", "test.100"]
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _ok(["ttest"])
    _ok(["report"])
    assert {p: (reports / p).read_bytes() for p in first} == first
    request.getfixturevalue("title_only_figures")  # the dated headers are the tables'
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1800000000")
    _ok(["report"])
    assert (reports / "metrics/wesad-fedip.json").read_bytes() == first["metrics/wesad-fedip.json"]
    assert (reports / "tables/fedclip.md").read_bytes() != first["tables/fedclip.md"]


def test_missing_input_fails_naming_the_file(workdir):
    write_assess(workdir, skip=("hhar", "fedclip-replay"))
    for cmd in (["ttest"], ["report"]):
        result = runner.invoke(app, cmd)
        assert result.exit_code == 1
        assert result.stderr.strip().splitlines() == [
            "error: runs/assess/hhar/fedclip-replay.json: not found: run `esnfed assess --dataset hhar "
            "--algo fedclip --strategy replay` first, or pass --allow-missing"]
    assert not (workdir / "reports" / "tables").exists()
    (workdir / "runs" / "assess" / "wesad" / "ridge.json").unlink()  # the first read; one more after it
    result = runner.invoke(app, ["ttest"])
    assert result.exit_code == 1 and result.stderr.strip() == (
        "error: runs/assess/wesad/ridge.json: not found: run `esnfed assess --dataset wesad --algo ridge` first, "
        "or pass --allow-missing (1 more assess file(s) missing)")


def test_report_before_ttest_names_the_command_and_writes_nothing(workdir):
    write_assess(workdir)
    result = runner.invoke(app, ["report", "--allow-missing"])
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: reports/ttest.json: not found: run `esnfed ttest` first"
    assert not (workdir / "reports").exists()


@pytest.mark.parametrize("option", ["--privacy-dir", "--flower-dir", "--data-dir"])
def test_a_folder_named_on_the_command_line_that_is_not_there_is_a_usage_error(workdir, option):
    """The report reads its privacy, Flower and data folders when they are there (their defaults may
    be absent: the stage not run); one named on the command line must be there: a mistyped name
    is a usage error naming the option, and the earlier report stays as it was (not re-rendered
    without its privacy table or SecAgg+ section)."""
    write_assess(workdir)
    _ok(["ttest"])
    _ok(["report"])
    before = {p: p.read_bytes() for p in (workdir / "reports").rglob("*") if p.is_file()}
    (workdir / "a-file").write_text("x")
    for value, problem in (("no-such-folder", "not found"), ("a-file", "is not a folder")):
        result = runner.invoke(app, ["report", option, value])
        assert result.exit_code == 2, result.output
        assert f"Invalid value for '{option}': {value}: {problem}" in " ".join(result.output.split())
    assert {p: p.read_bytes() for p in (workdir / "reports").rglob("*") if p.is_file()} == before
    (workdir / "empty").mkdir()
    _ok(["report", option, "empty"])  # a folder that is there, even empty, is read as before


def test_allow_missing_writes_na_and_lists_the_file(workdir):
    write_assess(workdir, skip=("hhar", "fedclip-replay"))
    _ok(["ttest", "--allow-missing"])
    _ok(["report", "--allow-missing"])
    md = (workdir / "reports" / "tables" / "fedclip.md").read_text()
    assert "runs/assess/hhar/fedclip-replay.json" in md and "n/a" in md
    assert "Missing inputs (n/a cells): none" in (workdir / "reports" / "tables" / "fedip.md").read_text()
    assert not (workdir / "reports" / "metrics" / "hhar-fedclip-replay.json").exists()
    assert (workdir / "reports" / "metrics" / "wesad-fedclip-replay.json").is_file()


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["pcts"]["50"].__setitem__("test_accuracy", [0.5, 1.5]), "pcts.50.test_accuracy"),
    (lambda d: d["pcts"].pop("75"), "pcts.75 missing"),
    (lambda d: d.__setitem__("method", "ip"), "method"),
])
def test_bad_assess_file_is_one_line_error(workdir, mutate, needle):
    write_assess(workdir)
    path = workdir / "runs" / "assess" / "wesad" / "fedip.json"
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["ttest"])
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert "\n" not in line and "runs/assess/wesad/fedip.json" in line and needle in line


@pytest.mark.parametrize("clients, problem", [
    ([[0.5, float("nan")], [0.6, 0.7]], "pcts.100.client_test_accuracy[0] holds nan, expected a fraction in [0, 1]"),
    ([[0.5, 0.4], [0.6, 1.5]], "pcts.100.client_test_accuracy[1] holds 1.5, expected a fraction in [0, 1]"),
    ([[0.5, 0.4]], "pcts.100.client_test_accuracy must list the clients' accuracies of each retrain"),
    ([[0.5, 0.4], []], "pcts.100.client_test_accuracy[1] must be a non-empty list of accuracies"),
])
def test_a_heterogeneous_file_s_client_accuracies_are_checked_as_its_test_accuracies(tmp_path, clients, problem):
    """NaN in pcts.<pct>.client_test_accuracy passed `esnfed ttest` and `esnfed report`
    (the heterogeneous table's spread printed nan); it is refused as NaN in test_accuracy is."""
    from esnfed_core.errors import DataError
    from esnfed_stages.report.ttest import load_assess

    comm = {"classes": 2, "clients": 2, "down_bytes": 8, "down_floats": 1, "inputs": 2, "rounds": 1,
            "up_bytes": 8, "up_floats": 1}
    doc = {"dataset": "hhar", "method": "align-0.25", "pcts": {"100": {
        "test_accuracy": [0.5, 0.6], "client_test_accuracy": [[0.5, 0.4], [0.6, 0.7]], "communication": comm}}}
    path = tmp_path / "align-0.25.json"
    path.write_text(json.dumps(doc))
    assert load_assess(path, "hhar", "align-0.25", partial=True)["pcts"]["100"]["client_test_accuracy"]
    doc["pcts"]["100"]["client_test_accuracy"] = clients
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as info:
        load_assess(path, "hhar", "align-0.25", partial=True)
    assert str(info.value).startswith(f"{path}: {problem}"), str(info.value)


def test_a_malformed_activation_entry_names_the_missing_key_not_a_python_repr(workdir):
    write_assess(workdir)
    path = workdir / "runs" / "assess" / "wesad" / "fedip.json"
    doc = json.loads(path.read_text())
    del doc["pcts"]["100"]["activation"]["users"]
    path.write_text(json.dumps(doc))
    _ok(["ttest"])  # the t-tests of the file as it is (ttest reads no activation)
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert "\n" not in line and "runs/assess/wesad/fedip.json: pcts.100.activation: expected edges" in line
    assert "(missing key 'users'); rerun `esnfed assess`" in line and "KeyError" not in line


@pytest.mark.parametrize("value, problem", [
    ("12", "pcts.50.communication: expected an object of message counts or null, got '12'"),
    ([1, 2], "pcts.50.communication: expected an object of message counts or null, got [1, 2]"),
    (None, "pcts.50.communication: missing (a federated method records its messages)"),
    ({"up_floats": 1}, "pcts.50.communication.down_floats: missing"),
    ("up_bytes=-8", "pcts.50.communication.up_bytes: expected an integer >= 0, got -8"),
    ("rounds=7.5", "pcts.50.communication.rounds: expected an integer >= 0, got 7.5"),
    ("clients=true", "pcts.50.communication.clients: expected an integer >= 0, got True"),
    ("up_floats='9'", "pcts.50.communication.up_floats: expected an integer >= 0, got '9'"),
])
def test_a_malformed_communication_entry_is_one_line_naming_file_and_key(workdir, value, problem):
    """Leftovers of the input audit: report skipped a non-object communication entry of a
    federated method (its row silently missing from communication.md) and int()-converted
    strings, floats and booleans."""
    write_assess(workdir)
    path = workdir / "runs" / "assess" / "wesad" / "incfed.json"
    doc = json.loads(path.read_text())
    entry = doc["pcts"]["50"]
    if isinstance(value, str) and "=" in value:
        key, raw = value.split("=")
        entry["communication"][key] = json.loads(raw.replace("'", '"'))
    else:
        entry["communication"] = value
    path.write_text(json.dumps(doc))
    for cmd in (["report"], ["ttest"]):
        result = runner.invoke(app, cmd)
        assert result.exit_code == 1, result.output
        assert result.stderr.strip() == f"error: runs/assess/wesad/incfed.json: {problem}"
    assert not (workdir / "reports" / "tables").exists()


def test_a_non_federated_method_may_have_no_communication(workdir):
    """null is the contract's value for the other methods (docs/assess-contract.md)."""
    write_assess(workdir)
    _ok(["ttest"])
    _ok(["report"])
    assert json.loads((workdir / "runs" / "assess" / "wesad" / "ridge.json").read_text())[
        "pcts"]["50"]["communication"] is None


@pytest.mark.parametrize("kind", ["dir", "fifo"])
def test_an_assess_path_that_is_a_folder_or_a_fifo_is_not_a_missing_input(workdir, kind):
    """--allow-missing turns a missing file into n/a cells; a folder or FIFO there is an error
    naming what it is (before: listed as missing)."""
    import os

    write_assess(workdir)
    path = workdir / "runs" / "assess" / "hhar" / "fedclip-replay.json"
    path.unlink()
    path.mkdir() if kind == "dir" else os.mkfifo(path)
    result = runner.invoke(app, ["ttest", "--allow-missing"])
    assert result.exit_code == 1
    problem = "is a directory, expected a file" if kind == "dir" else "is not a regular file: a named pipe (FIFO)"
    assert result.stderr.strip() == f"error: runs/assess/hhar/fedclip-replay.json: {problem}"


def test_bad_params_and_ttest_file(workdir):
    write_assess(workdir)
    result = runner.invoke(app, ["ttest", "--alpha", "2"])  # CLI misuse: a usage error
    assert result.exit_code == 2 and "Invalid value for '--alpha'" in result.output + result.stderr
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["ttest"]["alpha"] = 2.0
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    result = runner.invoke(app, ["ttest"])  # a bad params.yaml value: one line naming the key
    assert result.exit_code == 1 and "ttest.alpha" in result.stderr
    (workdir / "params.yaml").write_text(PARAMS)
    (workdir / "reports").mkdir()
    (workdir / "reports" / "ttest.json").write_text("{}")
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1 and "reports/ttest.json" in result.stderr


def test_help_explains_every_option():
    for cmd, options in (("ttest", ["--variant", "--alpha", "--allow-missing", "--assess-dir"]),
                         ("report", ["--allow-missing", "--out-dir", "--ttest", "--data-dir", "--privacy-dir",
                                     "--flower-dir"])):
        out = runner.invoke(app, [cmd, "--help"], env={"COLUMNS": "200"}).output
        for opt in options:
            assert opt in out


def _equal_length_assess(root: Path, seeds_of: dict[str, list[int]] | None = None) -> None:
    """Assess files whose methods all have 3 retrains on seeds [0, 1, 2] (paired tests)."""
    write_assess(root)
    for ds, method in required_inputs():
        path = root / "runs" / "assess" / ds / f"{method}.json"
        doc = json.loads(path.read_text())
        for entry in doc["pcts"].values():
            entry["test_accuracy"] = entry["test_accuracy"][:3]
            entry["seeds"] = (seeds_of or {}).get(method, [0, 1, 2])
            if entry["stream_accuracy"] is not None:
                entry["stream_accuracy"] = entry["stream_accuracy"][:3]
        path.write_text(json.dumps(doc))


def test_paired_ttest_stage_uses_ttest_rel_and_says_so(workdir):
    _equal_length_assess(workdir)
    (workdir / "params.yaml").write_text(PARAMS.replace("variant: welch", "variant: paired"))
    _ok(["ttest"])
    doc = json.loads((workdir / "reports" / "ttest.json").read_text())
    assert doc["variant"] == "paired"
    comp = next(c for c in doc["comparisons"] if c["table"] == "ip-centralized"
                and c["dataset"] == "wesad" and c["pct"] == "25")
    ref = scipy.stats.ttest_rel(WIDE[:3], LOW)
    assert (comp["a"], comp["b"]) == ("ip", "ridge")
    assert comp["t"] == pytest.approx(float(ref.statistic), rel=1e-12)
    assert comp["p"] == pytest.approx(float(ref.pvalue), rel=1e-12)
    _ok(["report"])
    md = (workdir / "reports" / "tables" / "ip-centralized.md").read_text()
    assert "paired t-test (scipy.stats.ttest_rel" in md and "with-ip vs without-ip" in md


def test_paired_ttest_refuses_unpaired_retrains(workdir):
    _equal_length_assess(workdir, {"fedip": [5, 6, 7]})
    result = runner.invoke(app, ["ttest", "--variant", "paired"])
    assert result.exit_code != 0
    assert "fedip.json" in result.output and "seeds" in result.output
    assert not (workdir / "reports" / "ttest.json").exists()


@pytest.mark.parametrize("key, value, problem", [
    ("p", float("nan"), "p: expected a finite number or null, got nan"),
    ("p", 1.5, "p: expected a probability in [0, 1], got 1.5"),
    ("mean_a", "0.9", "mean_a: expected a finite number or null, got '0.9'"),
    ("significant", "no", "significant: expected true or false, got 'no'"),
    ("pct", 50, "pct: expected a string, got 50"),
    ("n_b", -1, "n_b: expected a count >= 0, got -1"),
])
def test_a_ttest_comparison_of_the_wrong_type_is_one_line_naming_it(workdir, key, value, problem):
    """Input audit: before, a NaN or out-of-range p or a string mean went into the tables (exit 0)."""
    write_assess(workdir)
    assert runner.invoke(app, ["ttest"]).exit_code == 0
    path = workdir / "reports" / "ttest.json"
    doc = json.loads(path.read_text())
    doc["comparisons"][0][key] = value
    path.write_text(json.dumps(doc))
    tables = {p.name: p.read_bytes() for p in (workdir / "reports").rglob("*") if p.is_file()}
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: reports/ttest.json: comparisons[0].{problem} (rerun `esnfed ttest`)"]
    assert {p.name: p.read_bytes() for p in (workdir / "reports").rglob("*") if p.is_file()} == tables


def test_ttest_and_report_refuse_assess_files_of_another_budget(workdir):
    """A table mixing budgets would print cells a reader cannot trust: ttest and report name the
    first assess file assessed under another budget than params.yaml's and write nothing."""
    write_assess(workdir)  # assessed under "default"
    (workdir / "params.yaml").write_text("budget: default\n" + PARAMS)
    _ok(["ttest"])
    ttest = (workdir / "reports" / "ttest.json").read_bytes()
    (workdir / "params.yaml").write_text("budget: paper\n" + PARAMS)
    first = workdir / "runs" / "assess" / required_inputs()[0][0] / f"{required_inputs()[0][1]}.json"
    for command in ("ttest", "report"):
        result = runner.invoke(app, [command])
        assert result.exit_code == 1
        line = result.stderr.strip()
        assert line.startswith(f"error: {first.relative_to(workdir)}: assessed under budget 'default' but "
                               "params.yaml's budget is 'paper': rerun select, retrain and `esnfed assess "
                               f"--dataset {required_inputs()[0][0]} "), line
    assert (workdir / "reports" / "ttest.json").read_bytes() == ttest
    assert sorted(p.name for p in (workdir / "reports").iterdir()) == ["ttest.json"]


def test_a_papers_own_budget_makes_its_tables_alone_comparable_down_to_the_agreement_line(workdir):
    """budget `esann` on the real recordings (docs/protocol-variants.md "ESANN 2022 protocol variant") is the protocol
    of the ESANN 2022 table, not of the others: esann.md states the protocol and expects its
    significance pattern to agree; fedip.md says why it is not comparable; the index names both."""
    write_assess(workdir)
    for path in (workdir / "runs" / "assess").rglob("*.json"):
        path.write_text(path.read_text().replace('"budget": "default"', '"budget": "esann"')
                        .replace('"source": "synthetic"', '"source": "raw"'))
    _write_params(workdir, extra={"budget": "esann"})
    _ok(["ttest"])
    _ok(["report"])
    tables = workdir / "reports" / "tables"
    esann, fedip = ((tables / f"{t}.md").read_text("utf-8") for t in ("esann", "fedip"))
    assert ("- Protocol: the ESANN 2022 paper's (docs/protocol.md, \"ESANN 2022 protocol variant\"): the real "
            "recordings (data.source: raw) under budget `esann`. The 'paper' columns are the published values "
            "beside ours.\n") in esann
    assert "Not comparable" not in esann and "**Agreement with the paper**: " in esann
    assert ("- **Not comparable with the published values:** this run used the real recordings (data.source: raw) "
            "and budget `esann`, the ESANN 2022 paper's protocol for tables esann, esann-protocol alone, not this "
            "table's paper's (budget `paper`, PROTOCOL §6).") in fedip
    assert "**Agreement with the paper** (not expected to agree: this run is not the papers' protocol" in fedip
    index = (workdir / "reports" / "README.md").read_text("utf-8").split("\n\n")[2]
    assert index.startswith("Protocol: the ESANN 2022 paper's (docs/protocol.md, \"ESANN 2022 protocol variant\") "
                            "in tables esann alone: the real recordings (data.source: raw) under budget `esann`. "
                            "**Not comparable** with the published values in tables ijcnn-wesad, ijcnn-hhar, fedip, "
                            "fedclip, ip-centralized, clip-centralized: not their paper's protocol"), index


# ---------------------------------------------------------------- inputs of other params than params.yaml's
def _reports(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in (root / "reports").rglob("*") if p.is_file()}


def _write_params(root: Path, edit=None, extra: dict | None = None) -> None:
    params = {**yaml.safe_load(PARAMS), **(extra or {})}
    if edit is not None:
        edit(params)
    (root / "params.yaml").write_text(yaml.safe_dump(params))


def _refused(root: Path, line: str) -> None:
    """`esnfed report` exits 1 with ``line`` alone and leaves the earlier report as it was."""
    before = _reports(root)
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [f"error: {line}"]
    assert _reports(root) == before


@pytest.mark.parametrize("edit, computed, now", [
    (lambda p: p["ttest"].update(alpha=0.01), "alpha 0.05", "ttest.alpha is 0.01"),
    (lambda p: p["ttest"].update(variant="student"), "variant 'welch'", "ttest.variant is 'student'"),
    (lambda p: p.update(datasets=["wesad"]), "datasets ['wesad', 'hhar']", "datasets is ['wesad']"),
    (lambda p: p.update(continual_datasets=["hhar"]), "continual_datasets ['wesad', 'hhar']",
     "continual_datasets is ['hhar']"),
])
def test_report_refuses_a_ttest_file_of_other_settings_than_params_yaml(workdir, edit, computed, now):
    """Before, a user who edited ttest.alpha (or the datasets) and ran `esnfed report` got the old
    tests' marks under the new settings (exit 0)."""
    write_assess(workdir)
    _ok(["ttest"])
    _ok(["report"])
    _write_params(workdir, edit)
    _refused(workdir, f"reports/ttest.json: computed with {computed} but params.yaml's {now}: rerun `esnfed ttest`")
    _ok(["ttest"])  # as the message says: the report renders again
    _ok(["report"])


def test_report_refuses_a_ttest_file_of_another_budget_or_a_command_line_alpha(workdir):
    write_assess(workdir)  # assessed under "default"
    _write_params(workdir, extra={"budget": "default"})
    _ok(["ttest", "--alpha", "0.1"])  # the command line's alpha is recorded: not params.yaml's
    _refused(workdir, "reports/ttest.json: computed with alpha 0.1 but params.yaml's ttest.alpha is 0.05: "
                      "rerun `esnfed ttest`")
    _ok(["ttest"])
    for path in (workdir / "runs" / "assess").rglob("*.json"):  # assessed anew under another budget
        path.write_text(path.read_text().replace('"budget": "default"', '"budget": "paper"'))
    _write_params(workdir, extra={"budget": "paper"})
    _refused(workdir, "reports/ttest.json: computed with budget 'default' but params.yaml's budget is 'paper': "
                      "rerun `esnfed ttest`")


def test_a_refusal_names_the_params_file_given_by_params_not_params_yaml(workdir):
    """Under `--params FILE` a file computed with other values than FILE's was refused saying
    "params.yaml's <key>", a file the command had not read (here params.yaml still holds the value
    the ttest was computed with)."""
    write_assess(workdir)
    _ok(["ttest"])
    params = yaml.safe_load(PARAMS)
    params["ttest"]["alpha"] = 0.01
    (workdir / "study.yaml").write_text(yaml.safe_dump(params))
    before = _reports(workdir)
    result = runner.invoke(app, ["report", "--params", "study.yaml"])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [
        "error: reports/ttest.json: computed with alpha 0.05 but study.yaml's ttest.alpha is 0.01: rerun `esnfed ttest`"]
    assert _reports(workdir) == before
    for path in (workdir / "runs" / "assess").rglob("*.json"):  # the budget check of the assess files too
        path.write_text(path.read_text().replace('"budget": "default"', '"budget": "paper"'))
    (workdir / "study.yaml").write_text(yaml.safe_dump({**params, "budget": "default"}))
    result = runner.invoke(app, ["ttest", "--params", "study.yaml"])
    assert result.exit_code == 1, result.output
    line = result.stderr.strip()
    assert "assessed under budget 'paper' but study.yaml's budget is 'default': rerun" in line, line
    assert "params.yaml" not in line, line


def _ttest_without(workdir: Path, key: str) -> tuple[Path, dict]:
    """reports/ttest.json of write_assess's files as written before it recorded ``key``."""
    write_assess(workdir)
    _ok(["ttest"])
    path = workdir / "reports" / "ttest.json"
    doc = json.loads(path.read_text())
    del doc[key]
    path.write_text(json.dumps(doc))
    return path, doc


def test_a_ttest_file_without_params_is_checked_by_its_variant_and_alpha_and_trusted_otherwise(workdir):
    """A ttest.json written before it recorded ``params`` still has its variant and alpha; what it
    does not record (the datasets) is trusted, as an assess file without a budget."""
    _ttest_without(workdir, "params")
    _ok(["report"])
    _write_params(workdir, lambda p: p.update(datasets=["wesad"]))
    _ok(["report"])
    _write_params(workdir, lambda p: p["ttest"].update(alpha=0.01))
    _refused(workdir, "reports/ttest.json: computed with alpha 0.05 but params.yaml's ttest.alpha is 0.01: "
                      "rerun `esnfed ttest`")


PRIVACY = {"epsilons": [1, float("inf")], "delta": "auto", "relation": "user", "clip": 0.003, "ip_clip": 0.1,
           "pct": "100", "methods": ["incfed", "fedip"]}


def _privacy_output(root: Path, params: dict, record: bool = True, dataset: str = "wesad") -> None:
    """runs/privacy/<dataset>.json as `esnfed privacy` writes it under ``params`` (made-up accuracies)."""
    from esnfed_stages.params.privacy import privacy_params
    from esnfed_stages.layout import eps_key

    pp = privacy_params(params)
    eps = {eps_key(e): {"noise_multiplier": 0.0 if e == float("inf") else 2.5, "test_accuracy": [0.6, 0.62]}
           for e in pp.epsilons}
    doc = {"dataset": dataset, "pct": pp.pct, "n_users": 9, "n_units": 9, "delta": pp.delta_for(9),
           "relation": pp.relation, "clip": pp.clip_for(dataset),
           "ip_clip": pp.ip_clip_for(dataset), "mechanism": "Gaussian mechanism",
           "accountant": "dp-accounting PLD", "seeds": [0, 1],
           "methods": {m: {"config": {}, "releases": 1, "epsilons": eps} for m in pp.methods}}
    if record:
        doc["params"] = pp.record(params.get("budget"))
    path = root / "runs" / "privacy" / f"{dataset}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("edit, computed, now", [
    (lambda p: p.update(clip=0.01), "clip 0.003", "privacy.clip is 0.01"),
    (lambda p: p.update(ip_clip={"wesad": 0.1, "hhar": 0.2}), "ip_clip 0.1",
     "privacy.ip_clip is {hhar: 0.2, wesad: 0.1}"),  # a mapping, as clip's (params.yaml written sorted)
    (lambda p: p.update(epsilons=[1, 2, float("inf")]), "epsilons ['1', 'inf']",
     "privacy.epsilons is ['1', '2', 'inf']"),
    (lambda p: p.update(delta=1e-5), "delta 'auto'", "privacy.delta is 1e-05"),
    (lambda p: p.update(pct="50"), "pct '100'", "privacy.pct is '50'"),
    (lambda p: p.update(methods=["incfed"]), "methods ['incfed', 'fedip']", "privacy.methods is ['incfed']"),
])
def test_report_refuses_a_privacy_output_of_other_privacy_settings(workdir, edit, computed, now):
    """Before, the privacy table rendered rows computed under the old privacy section (exit 0)."""
    write_assess(workdir)
    _write_params(workdir, extra={"privacy": PRIVACY})
    for ds in ("wesad", "hhar"):  # every declared dataset's (one missing is refused as an assess file)
        _privacy_output(workdir, {"privacy": PRIVACY}, dataset=ds)
    _ok(["ttest"])
    _ok(["report"])
    assert "| WESAD | incfed |" in (workdir / "reports" / "tables" / "privacy.md").read_text()
    _write_params(workdir, lambda p: edit(p["privacy"]), extra={"privacy": dict(PRIVACY)})
    _refused(workdir, f"runs/privacy/wesad.json: computed with {computed} but params.yaml's {now}: "
                      "rerun `esnfed privacy --dataset wesad`")


def test_a_privacy_output_of_another_budget_is_refused_and_one_without_params_trusted_but_its_clip(tmp_path):
    from esnfed_core.errors import DataError
    from esnfed_stages.report import privacy_report
    from esnfed_stages.params.privacy import privacy_params

    params = {"privacy": PRIVACY, "budget": "default"}
    _privacy_output(tmp_path, params)
    folder = tmp_path / "runs" / "privacy"
    assert list(privacy_report.load(folder, privacy_params(params).record("default"))) == ["wesad"]
    with pytest.raises(DataError, match=r"wesad.json: computed with budget 'default' but params.yaml's budget "
                                        r"is 'paper': rerun `esnfed privacy --dataset wesad`$"):
        privacy_report.load(folder, privacy_params(params).record("paper"))
    _privacy_output(tmp_path, params, record=False)  # written before the document recorded ``params``
    other = {"privacy": {**PRIVACY, "epsilons": [8]}}
    assert list(privacy_report.load(folder, privacy_params(other).record("paper"))) == ["wesad"]
    other["privacy"]["clip"] = 0.5  # its top-level clip is still what it was computed with
    with pytest.raises(DataError, match=r"computed with clip 0.003 but params.yaml's privacy.clip is 0.5"):
        privacy_report.load(folder, privacy_params(other).record("paper"))


def _flower_output(root: Path, budget: str | None) -> None:
    """Every result the flower stage writes (plain and SecAgg+ IncFed and FedIP of WESAD and HHAR;
    the report requires them all once one is there); WESAD's IncFed pair under ``budget`` (None:
    written before results recorded it), the others without one."""
    for ds in ("wesad", "hhar"):
        folder = root / "runs" / "flower" / ds
        folder.mkdir(parents=True, exist_ok=True)
        for app in ("incfed", "fedip"):
            for secagg in (False, True):
                doc = {"dataset": ds, "app": app, "secagg": secagg, "pct": "100", "n_clients": 3,
                       "flower": {"bytes": {"rows": [{"phase": "stats", "stage": "plain", "rounds": 1,
                                                      "up_per_client_round": 100.0 * (1 + secagg),
                                                      "down_per_client_round": 10.0}]}}}
                if budget is not None and (ds, app) == ("wesad", "incfed"):
                    doc["params"] = {"budget": budget}
                (folder / f"{ds}-{app}{'-secagg' if secagg else ''}-100.json").write_text(json.dumps(doc))


def test_report_refuses_flower_results_of_another_budget(workdir):
    """The SecAgg+ section of communication.md next to the assess files' measured rows: both of
    params.yaml's budget, else one line naming the result and the `esnfed flower` to rerun."""
    write_assess(workdir)
    _write_params(workdir, extra={"budget": "default"})
    _flower_output(workdir, "default")
    _ok(["ttest"])
    _ok(["report"])
    assert "| WESAD | incfed | 100% | 3 | stats | 1 | **total** | 100 | 10 | 200 | 10 | 2.00 | 1.00 |" in \
        (workdir / "reports" / "tables" / "communication.md").read_text()
    _flower_output(workdir, "paper")
    _refused(workdir, "runs/flower/wesad/wesad-incfed-100.json: computed with budget 'paper' but params.yaml's "
                      "budget is 'default': rerun `esnfed flower --dataset wesad --app incfed --out-dir "
                      "runs/flower/wesad`")
    _flower_output(workdir, None)  # results written before they recorded the budget: trusted
    _ok(["report"])


def test_report_reads_privacy_and_flower_outputs_from_the_folders_it_is_given(workdir):
    """--privacy-dir and --flower-dir: a report of other folders' assess files never picks up the
    current folder's runs/privacy and runs/flower (a developer's own outputs)."""
    write_assess(workdir)
    _write_params(workdir, extra={"budget": "default"})
    _ok(["ttest"])
    _flower_output(workdir, "paper")  # the current folder's: of another budget, refused when read
    (workdir / "runs" / "privacy").mkdir(parents=True)
    (workdir / "runs" / "privacy" / "wesad.json").write_text("{}")  # not a privacy output
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 1 and "runs/privacy/wesad.json" in result.stderr
    elsewhere = workdir / "elsewhere"
    for name in ("privacy", "flower"):  # there, but empty: the stages did not run for those inputs
        (elsewhere / name).mkdir(parents=True)
    _ok(["report", "--privacy-dir", str(elsewhere / "privacy"), "--flower-dir", str(elsewhere / "flower")])
    tables = workdir / "reports" / "tables"
    assert not (tables / "privacy.md").exists()
    assert (tables / "secagg-overhead.csv").read_text().count("\n") == 1  # the header alone: not run
    _flower_output(elsewhere, "default")
    (elsewhere / "flower").rmdir()
    (elsewhere / "runs" / "flower").rename(elsewhere / "flower")
    _ok(["report", "--privacy-dir", str(elsewhere / "privacy"), "--flower-dir", str(elsewhere / "flower")])
    assert "| WESAD | incfed | 100% | 3 | stats | 1 | **total** | 100 | 10 | 200 | 10 | 2.00 | 1.00 |" in \
        (tables / "communication.md").read_text()


HETERO = {"seed": 0, "mode": "space", "vary": ["spectral_radius", "leak"], "combine": "softmax", "alphas": [0.5],
          "pcts": {"default": ["25", "100"]}}


def _hetero_outputs(root: Path, record: bool = True) -> list[str]:
    """The heterogeneous table's assess files (local, ensemble, align-0.5 as `esnfed assess` writes
    them under HETERO; incfed, a stationary method, records no heterogeneity) -> their methods."""
    from esnfed_stages.params.hetero import hetero_params

    hp = hetero_params({"heterogeneity": HETERO})
    methods = [m.id for m in hp.methods()] + ["incfed"]
    for method in methods:
        entry = {**_entry("wesad", "incfed", "25"), "client_test_accuracy": [[0.7, 0.8]] * 3}
        doc = {"dataset": "wesad", "method": method, "budget": "default", "pcts": {p: entry for p in ("25", "100")}}
        if record and method != "incfed":
            doc["params"] = hp.record
        path = root / "wesad" / f"{method}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
    return methods


@pytest.mark.parametrize("change, computed, now", [
    ({"combine": "vote"}, "combine 'softmax'", "heterogeneity.combine is 'vote'"),
    ({"mode": "seed"}, "mode 'space'", "heterogeneity.mode is 'seed'"),
    ({"vary": ["leak"]}, "vary ['spectral_radius', 'leak']", "heterogeneity.vary is ['leak']"),
    ({"seed": 3}, "seed 0", "heterogeneity.seed is 3"),
])
def test_heterogeneous_inputs_of_other_heterogeneity_settings_are_refused(tmp_path, change, computed, now):
    """The heterogeneous table's header prints params.yaml's heterogeneity settings: before, it
    printed them over assess files computed under others (exit 0)."""
    from esnfed_core.errors import DataError
    from esnfed_stages.report import hetero_report
    from esnfed_stages.params.experiment import BudgetSpec
    from esnfed_stages.params.hetero import hetero_params

    methods = _hetero_outputs(tmp_path)
    default = BudgetSpec("default")
    same = hetero_report.load(tmp_path, methods, default, hetero_params({"heterogeneity": HETERO}).record)
    assert sorted(m for _, m in same.docs) == sorted(methods)
    settings = hetero_params({"heterogeneity": {**HETERO, **change}}).record
    with pytest.raises(DataError) as info:
        hetero_report.load(tmp_path, methods, default, settings)
    assert str(info.value) == (f"{tmp_path / 'wesad' / 'local.json'}: computed with {computed} but params.yaml's "
                               f"{now}: rerun select, retrain and `esnfed assess --dataset wesad --algo local` "
                               "under it (dvc repro does)")
    _hetero_outputs(tmp_path, record=False)  # assessed before the files recorded the settings: trusted
    assert len(hetero_report.load(tmp_path, methods, default, settings).docs) == len(methods)


def test_a_params_record_that_is_not_an_object_is_one_line_naming_it(tmp_path):
    from esnfed_core.errors import DataError
    from esnfed_stages import provenance

    with pytest.raises(DataError, match=r"^x.json: params: expected an object of params.yaml keys, got \[1\]$"):
        provenance.check("x.json", {"params": [1]}, {"budget": "default"}, "`esnfed ttest`")
    # params.yaml without the key (None): nothing to compare
    provenance.check("x.json", {"params": {"budget": "paper"}}, {"budget": None}, "`esnfed ttest`")


# params.yaml's seed and budgets, as the schema checks them
BUDGETS = {k: v for k, v in load_params(Path(__file__).resolve().parents[1] / "params.yaml").items()
           if k in ("seed", "budget", "budgets")}


def _write_budget(workdir: Path, params: dict) -> None:
    (workdir / "params.yaml").write_text(yaml.safe_dump(params) + PARAMS)


def _stamp_digests(workdir: Path, params: dict) -> None:
    """The assess files as assess writes them under ``params``: with the budget's digest."""
    from esnfed_core.method import Method
    from esnfed_stages.params.experiment import budget_spec

    for ds, method in required_inputs():
        path = workdir / "runs" / "assess" / ds / f"{method}.json"
        doc = json.loads(path.read_text())
        doc["budget_digest"] = budget_spec(params).digest(ds, Method.parse(method), assessed=True)
        path.write_text(json.dumps(doc))


def _edited(edit) -> dict:
    import copy

    params = copy.deepcopy(BUDGETS)
    edit(params["budgets"]["default"], params)
    return params


@pytest.mark.parametrize("edit, first", [
    (lambda b, p: b["space"]["hhar"].update(units=[40]), ("hhar", "ridge")),  # random draws no space
    (lambda b, p: b.update(retrains=5), ("wesad", "random")),  # every file holds `retrains` scores
    (lambda b, p: p.update(seed=p["seed"] + 1), ("wesad", "random")),
], ids=["space.hhar", "retrains", "seed"])
def test_ttest_and_report_refuse_assess_files_of_an_edited_budget(workdir, edit, first):
    """budgets.default edited by hand after assess, the name unchanged: ttest and report name the
    first assess file whose budget digest differs from params.yaml's and write nothing."""
    write_assess(workdir)
    _stamp_digests(workdir, BUDGETS)
    _write_budget(workdir, BUDGETS)
    _ok(["ttest"])
    ttest = (workdir / "reports" / "ttest.json").read_bytes()
    _write_budget(workdir, _edited(edit))
    path = Path("runs") / "assess" / first[0] / f"{first[1]}.json"
    for command in ("ttest", "report"):
        result = runner.invoke(app, [command])
        assert result.exit_code == 1
        assert result.stderr.strip().splitlines() == [
            f"error: {path}: assessed under budget 'default' with another search space, trials, retrains or "
            f"seed than params.yaml's now: rerun select, retrain and `esnfed assess --dataset {first[0]} "
            f"--algo {first[1]}` under it (dvc repro does)"]
    assert (workdir / "reports" / "ttest.json").read_bytes() == ttest
    assert sorted(p.name for p in (workdir / "reports").iterdir()) == ["ttest.json"]


def test_ttest_accepts_another_budgets_edit_and_assess_files_without_the_digest(workdir):
    """An edit of another budget's entry changes no assess file's digest; files written before the
    digest was recorded are trusted (the name is still compared)."""
    write_assess(workdir)
    _stamp_digests(workdir, BUDGETS)
    _write_budget(workdir, _edited(lambda b, p: p["budgets"]["paper"]["space"]["wesad"].update(units=[100])))
    _ok(["ttest"])
    write_assess(workdir)  # no budget_digest
    _write_budget(workdir, _edited(lambda b, p: b["space"]["wesad"].update(units=[40])))
    _ok(["ttest"])


def test_report_refuses_a_ttest_file_computed_before_the_assess_files_were_rerun(workdir):
    """budgets.default edited by hand, then select, retrain and assess rerun under it but not ttest:
    the assess files agree with params.yaml, the t-tests are of the files before. ttest.json records
    what it read (``assess_digests``): the report names it and `esnfed ttest`, and renders again after."""
    write_assess(workdir)
    _stamp_digests(workdir, BUDGETS)
    _write_budget(workdir, BUDGETS)
    _ok(["ttest"])
    digests = json.loads((workdir / "reports" / "ttest.json").read_text())["assess_digests"]
    assert len(digests) == len(required_inputs()) and digests["wesad/ridge"] != digests["hhar/ridge"]
    _ok(["report"])
    edited = _edited(lambda b, p: b["space"]["hhar"].update(units=[40]))
    _write_budget(workdir, edited)
    _stamp_digests(workdir, edited)  # assessed again under the edited budget
    _refused(workdir, "reports/ttest.json: computed from runs/assess/hhar/ridge.json before it was assessed "
                      "again: rerun `esnfed ttest`")
    _ok(["ttest"])
    _ok(["report"])


def test_report_refuses_a_ttest_file_computed_without_a_file_found_now_or_with_one_missing_now(workdir):
    write_assess(workdir, skip=("hhar", "fedip"))
    _ok(["ttest", "--allow-missing"])
    write_assess(workdir)  # assessed since
    before = _reports(workdir)
    for args in (["report"], ["report", "--allow-missing"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1
        assert result.stderr.strip().splitlines() == [
            "error: reports/ttest.json: computed without runs/assess/hhar/fedip.json (missing then): rerun "
            "`esnfed ttest`"]
    assert _reports(workdir) == before
    _ok(["ttest"])
    (workdir / "runs" / "assess" / "hhar" / "fedip.json").unlink()
    result = runner.invoke(app, ["report", "--allow-missing"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "error: reports/ttest.json: computed from runs/assess/hhar/fedip.json, missing now: rerun `esnfed ttest`"]


def test_a_ttest_file_without_assess_digests_is_trusted(workdir):
    path, doc = _ttest_without(workdir, "assess_digests")
    f = workdir / "runs" / "assess" / "hhar" / "ridge.json"  # a score changed since: not known
    assess = json.loads(f.read_text())
    assess["pcts"]["25"]["test_accuracy"][0] /= 2
    f.write_text(json.dumps(assess))
    _ok(["report"])
    doc["assess_digests"] = [1]
    path.write_text(json.dumps(doc))
    _refused(workdir, "reports/ttest.json: assess_digests: expected an object of assess file digests, got [1] "
                      "(rerun `esnfed ttest`)")

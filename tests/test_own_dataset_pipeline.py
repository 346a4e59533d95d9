"""A user's own dataset through the whole pipeline: a plain CSV written by
`esnfed synthesize --dataset example`, imported, split by fractions, selected, retrained, assessed,
t-tested and reported in the generic tables; the papers' outputs byte-identical whether or not
a user dataset is declared; and a pipeline of that dataset alone (`datasets: [mine]`) reported with
its tables only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_stages.data.check_data import check_folder
from esnfed_stages.report.figures import png_title
from esnfed_stages.params.schema import embedded_read
from experiment_data import cli_ok, make_dataset, run_method_stages, small_params, stage_options, write_params

pytestmark = pytest.mark.pipeline
runner = CliRunner()
ALL = [("random", None), ("ridge", None), ("incfed", None), ("fedavg", None), ("ip", None), ("fedip", None),
       ("clip", "naive"), ("clip", "replay"), ("clip", "joint"),
       ("fedclip", "naive"), ("fedclip", "replay"), ("fedclip", "joint")]
PAPER_SUBSET = [("incfed", None), ("fedavg", None), ("fedip", None), ("fedclip", "naive")]


_ok = cli_ok


def _params(root: Path, declare_user: bool) -> Path:
    p = small_params()
    p["synthetic"]["example"] = {"seed": 0, "subjects": 6, "seconds_per_activity": 2.0, "rate": 20.0}
    p["imports"]["example"].update(source=str(root / "raw" / "EXAMPLE" / "recordings.csv"), rate=10, window=10)
    p["budgets"]["default"]["space"]["example"]["units"] = [8, 12]
    p["continual"]["joint"]["max_rounds"] = 3
    p["imported"] = {"example": p["imports"]["example"]["source"]}
    if not declare_user:
        p["datasets"] = ["wesad", "hhar"]
        p["continual_datasets"] = ["wesad", "hhar"]
        p["imported"] = {}  # the example paused: not imported
    p["embedded"] = embedded_read(p)  # the example's CSV is read from root/raw: no embedded folder of it
    return write_params(root, p)


def _stages(root: Path, dataset: str, methods) -> None:
    run_method_stages(root, dataset, methods)


def _report(root: Path, mp: pytest.MonkeyPatch) -> None:
    """ttest and report from inside ``root`` (relative paths: the tables list the missing inputs)."""
    mp.chdir(root)
    common = ["--params", "params.yaml", "--assess-dir", "runs/assess", "--allow-missing"]
    _ok("ttest", *common, "--out", "reports/ttest.json")
    _ok("report", *common, "--ttest", "reports/ttest.json", "--out-dir", "reports")


@pytest.fixture(scope="module")
def roots(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("SOURCE_DATE_EPOCH", "1700000000")
    out = {}
    for name, declare in (("without", False), ("with", True)):
        root = tmp_path_factory.mktemp(name)
        params = str(_params(root, declare))
        make_dataset(root, "wesad")
        _stages(root, "wesad", PAPER_SUBSET)
        if declare:
            _ok("synthesize", "--dataset", "example", "--out", str(root / "raw"), "--params", params)
            _ok("import", "--dataset", "example", "--out", str(root / "data" / "processed"), "--params", params)
            _ok("partition", "--dataset", "example", "--params", params,
                "--processed-dir", str(root / "data" / "processed"), "--out", str(root / "data" / "partitions"))
            _stages(root, "example", ALL)
        _report(root, monkeypatch_module)
        out[name] = root
    return out


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_declared_dataset_flows_from_import_to_the_generic_tables(roots):
    root = roots["with"]
    assert check_folder(root / "data" / "processed" / "example") == []
    part = json.loads((root / "data" / "partitions" / "example.json").read_text())
    assert [len(part["train"][p]) for p in ("25", "50", "75", "100")] == [1, 2, 3, 4]
    tables = root / "reports" / "tables"
    # one table per stationary comparison (IncFed vs FedAvg, FedIP vs IncFed, IP vs ridge), as the papers'
    stationary = "".join((tables / f"example-stationary-{name}.md").read_text() for name in ("incfed", "fedip", "ip"))
    continual = (tables / "example-continual.md").read_text()
    for label in ("random", "centralised", "fedavg", "incfed", "ip", "fedip"):
        assert f"| {label} " in stationary or f" {label} |" in stationary
    rows = [line for text in (stationary, continual) for line in text.splitlines() if line.startswith("| 25%")]
    assert len(rows) == 4 and all("n/a" not in r for r in rows)  # every method assessed
    assert stationary.count("Missing inputs (n/a cells): none") == 3 and "| paper" not in stationary
    assert "clip replay" in continual and "fedclip joint" in continual
    comm = (tables / "communication-example.md").read_text()
    assert comm.startswith("# communication-example: example: floats and bytes sent per client per round")
    index = (root / "reports" / "README.md").read_text()
    assert "| example: floats and bytes sent per client per round and in total |" in index
    assert "fedclip-joint" in comm and "incfed" in comm
    comps = json.loads((root / "reports" / "ttest.json").read_text())["comparisons"]
    assert {c["table"] for c in comps if c["dataset"] == "example"} == {
        "example-stationary-incfed", "example-stationary-fedip", "example-stationary-ip", "example-continual"}
    metrics = root / "reports" / "metrics"
    assert json.loads((metrics / "example-fedip.json").read_text())["test"].keys() == {"025", "050", "075", "100"}
    figure = (root / "reports" / "figures" / "stream-example-federated.png").read_bytes()
    # a user's dataset is named as declared, not upper-cased like WESAD and HHAR
    assert png_title(figure) == "example federated: stream accuracy after each context (FedCLIP; mean ± std over retrains)"
    centralised = (root / "reports" / "figures" / "stream-example-centralized.png").read_bytes()
    assert png_title(centralised) == "example centralised: stream accuracy after each context (CLIP; mean ± std over retrains)"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _timeless(data: bytes, name: str):
    """A trial record without its wall-clock "seconds" (the only field that differs run to run)."""
    if not name.endswith(".json"):
        return data
    doc = json.loads(data)
    if isinstance(doc, dict):
        doc.pop("seconds", None)
    return doc


def test_papers_outputs_are_byte_identical_with_and_without_a_user_dataset(roots):
    a, b = roots["without"], roots["with"]
    for sub in ("runs/select/wesad", "runs/models/wesad", "runs/assess/wesad"):
        fa, fb = _files(a / sub), _files(b / sub)
        assert fa and fa.keys() == fb.keys()
        if sub == "runs/select/wesad":
            assert [k for k in fa if _timeless(fa[k], k) != _timeless(fb[k], k)] == []
        else:
            assert [k for k in fa if fa[k] != fb[k]] == []
    for sub in ("tables", "figures", "plots", "metrics"):
        fa, fb = _files(a / "reports" / sub), _files(b / "reports" / sub)
        assert fa
        assert [k for k in fa if fa[k] != fb.get(k)] == []  # every paper file, same bytes
        assert all(k.startswith(("example-", "communication-example", "stream-example", "test-accuracy-example",
                                     "accuracy-matrix-example")) for k in fb.keys() - fa.keys())
    ta = json.loads((a / "reports" / "ttest.json").read_text())
    tb = json.loads((b / "reports" / "ttest.json").read_text())
    assert ta["comparisons"] == [c for c in tb["comparisons"] if c["dataset"] != "example"]
    assert ta["comparisons"]


def test_undeclared_dataset_is_a_usage_error_listing_the_declared(roots):
    root = roots["without"]
    result = runner.invoke(app, ["select", "--dataset", "example", "--algo", "ridge",
                                 "--params", str(root / "params.yaml")])
    assert result.exit_code == 2
    text = " ".join(w for w in result.output.split() if w not in "│╭╮╰╯─")
    assert "'example' is not declared in params.yaml datasets (declared: wesad, hhar)" in text


# ---------------------------------------------------------------- your own data only
def _user_only_params(root: Path) -> Path:
    """docs/own-data.md "Your own data": only `mine` declared (the example's CSV imported under another name,
    so nothing can lean on the name `example`), no space.wesad / space.hhar in the budget, no study
    of the papers' datasets (study_datasets: [])."""
    p = small_params()
    p["synthetic"]["example"] = {"seed": 0, "subjects": 6, "seconds_per_activity": 2.0, "rate": 20.0}
    p["imports"] = {"mine": dict(p["imports"]["example"], source=str(root / "raw" / "EXAMPLE" / "recordings.csv"),
                                 rate=10, window=10)}
    p["imported"] = {"mine": p["imports"]["mine"]["source"]}
    p["partition"] = {"mine": p["partition"]["example"]}
    for budget in p["budgets"].values():
        space = budget["space"]
        space["mine"] = dict(space.pop("example"), units=[8, 12])
        del space["wesad"], space["hhar"]
    p["continual"]["joint"]["max_rounds"] = 3
    p.update(datasets=["mine"], continual_datasets=["mine"], study_datasets=[],
             embedded={"synthesize": {}, "preprocess": {}})  # docs/own-data.md: no embedded data written
    p["assess"]["activation_datasets"] = []  # docs/own-data.md: the papers' datasets only have activation densities
    # one validation user of 6: privacy.config public needs two (docs/own-data.md), select runs it
    p["privacy"]["config"] = "select"
    return write_params(root, p)


@pytest.fixture(scope="module")
def user_only(tmp_path_factory, monkeypatch_module):
    """The commands dvc.yaml runs for `datasets: [mine]` (synthesize stands in for the user's CSV),
    then ttest and report without --allow-missing: nothing of the papers' may be asked for."""
    monkeypatch_module.setenv("SOURCE_DATE_EPOCH", "1700000000")
    root = tmp_path_factory.mktemp("user-only")
    params = str(_user_only_params(root))
    _ok("synthesize", "--dataset", "example", "--out", str(root / "raw"), "--params", params)
    _ok("import", "--dataset", "mine", "--out", str(root / "data" / "processed"), "--params", params)
    _ok("partition", "--dataset", "mine", "--params", params,
        "--processed-dir", str(root / "data" / "processed"), "--out", str(root / "data" / "partitions"))
    _stages(root, "mine", ALL)
    _ok("privacy", *stage_options(root, "mine"), "--out-dir", str(root / "runs" / "privacy"))
    monkeypatch_module.chdir(root)
    out = {"ttest": _ok("ttest", "--params", "params.yaml", "--out", "reports/ttest.json"),
           "report": _ok("report", "--params", "params.yaml", "--ttest", "reports/ttest.json", "--out-dir", "reports")}
    return root, out


def test_your_own_data_alone_is_reported_with_its_tables_only(user_only):
    root, out = user_only
    reports = root / "reports"
    names = {sub: sorted(p.name for p in (reports / sub).iterdir()) for sub in ("tables", "figures", "plots", "metrics")}
    tables = [f"mine-{t}" for t in ("stationary-incfed", "stationary-fedip", "stationary-ip", "continual")]
    assert names["tables"] == sorted([f"{t}.{ext}" for t in tables + ["communication-mine", "privacy",
                                                                      "mine-continual-metrics", "mine-selected"]
                                      for ext in ("md", "csv")])  # ip-fit: no activation densities here
    assert names["figures"] == ["accuracy-matrix-mine.png", "privacy.png", "stream-mine-centralized.png",
                                "stream-mine-federated.png", "test-accuracy-mine.png"]
    assert names["plots"] == sorted([f"stream-mine-{s}-{pct}.csv" for s in ("centralized", "federated")
                                     for pct in ("25", "50", "75", "100")] + ["test-accuracy-mine.csv"]
                                    + [f"accuracy-matrix-mine-{a}-{s}.csv" for a in ("clip", "fedclip")
                                       for s in ("naive", "replay", "joint")])
    assert names["metrics"] and all(n.startswith("mine-") for n in names["metrics"])
    for name in tables:  # every cell computed: no n/a, no missing input
        text = (reports / "tables" / f"{name}.md").read_text()
        assert "Missing inputs (n/a cells): none" in text
        rows = [line for line in text.splitlines() if line.startswith(("| 25%", "| 50%", "| 75%", "| 100%"))]
        assert len(rows) == 4 and all("n/a" not in r for r in rows), name
    metrics = (reports / "tables" / "mine-continual-metrics.md").read_text()  # its forgetting and transfer
    assert metrics.startswith("# mine-continual-metrics: mine: forgetting and transfer of the continual methods")
    assert "- FWT's chance level: mine C = 3, chance 33.33%" in metrics and "Missing inputs (n/a cells): none" in metrics
    assert metrics.count("| mine | ") == 6 * 4 and "| n/a" not in metrics  # methods × shares, every metric
    # the index lists what was written and nothing else
    index = (reports / "README.md").read_text()
    linked = sorted(set(re.findall(r"\]\((?:tables|figures)/([^)#]+)", index)))
    assert linked == sorted(n for n in names["tables"] + names["figures"])
    for absent in ("(tables/communication.md", "heterogeneous", "secagg", "(tables/fedip.md", "deep", "wesad",
                   "WESAD", "hhar", "HHAR", "paper' columns"):
        assert absent not in index, absent
    privacy = (reports / "tables" / "privacy.md").read_text()  # the privacy stage's row: mine's alone
    assert "| mine |" in privacy and "WESAD" not in privacy and "HHAR" not in privacy
    assert ("- `plots/`: 15 CSV files, the data of the stream-accuracy, test-accuracy and accuracy-matrix figures; "
            "`dvc plots show` draws them, a dataset of your own's, once `esnfed dvc-plots --dataset <name> --write` "
            "has declared its plots in dvc-plots/dvc.yaml") in index
    assert "(test-accuracy-<dataset>.csv: -x share)" in index
    # the t-tests: the user's tables, nothing missing; neither command prints a papers' table or a missing input
    doc = json.loads((reports / "ttest.json").read_text())
    assert doc["missing"] == [] and {c["dataset"] for c in doc["comparisons"]} == {"mine"}
    assert {c["table"] for c in doc["comparisons"]} == set(tables)
    assert set(doc["assess_digests"]) == {f"mine/{algo}-{strategy}" if strategy else f"mine/{algo}"
                                          for algo, strategy in ALL}
    for text in out.values():
        flat = " ".join(text.split())
        assert "missing inputs" not in flat and "wesad" not in flat and "hhar" not in flat
    assert "fedip: test accuracy" not in " ".join(out["report"].split())
    assert "wrote 16 table files, 5 figures, 15 plot data files" in " ".join(out["report"].split())
    selected = (reports / "tables" / "mine-selected.md").read_text()  # its selection, every share found
    assert selected.startswith("# mine-selected: ") and "Missing inputs (n/a rows): none" in selected
    assert "## " in selected and "| n/a" not in selected


# ---------------------------------------------------------------- the studies on your own data
def _flower_python() -> Path | None:
    """The Flower environment's interpreter: the project's (`make flower-env`), else the one beside
    this interpreter's environment (a git worktree sharing the main checkout's environments)."""
    import sys

    from esnfed_stages.layout import FLOWER_PYTHON

    found = [p for p in (FLOWER_PYTHON, Path(sys.prefix).parent / ".venv-flower" / "bin" / "python") if p.exists()]
    return found[0] if found else None


@pytest.fixture(scope="module")
def user_study(user_only, tmp_path_factory, monkeypatch_module):
    """`study_datasets: [mine]` in a pipeline of mine alone: the commands dvc.yaml's deep,
    heterogeneous and flower stages run for mine (on a copy of user_only's runs, at its tiny
    budget; one α and one share of the heterogeneous methods), then ttest and report without
    --allow-missing."""
    import shutil

    import yaml

    python = _flower_python()
    if python is None:
        pytest.skip("no Flower environment (make flower-env)")
    root = tmp_path_factory.mktemp("user-study") / "root"
    shutil.copytree(user_only[0], root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["study_datasets"] = ["mine"]
    params["heterogeneity"].update(alphas=[0.5], pcts={"default": ["100"]})
    write_params(root, params)
    common = stage_options(root, "mine")
    for algos in (["deep-incfed", "deep-fedip"], ["local", "ensemble", "align"]):
        flags = [a for algo in algos for a in ("--algo", algo)]
        _ok("select", *flags, "--pct", "all", *common)
        _ok("retrain", *flags, "--pct", "all", *common)
        _ok("assess", *flags, *common)
    _ok("flower", *common, "--app", "incfed", "--app", "fedip", "--plain-and-secagg",
        "--out-dir", str(root / "runs" / "flower" / "mine"), "--flower-python", str(python))
    monkeypatch_module.chdir(root)
    _ok("ttest", "--params", "params.yaml", "--out", "reports/ttest.json")
    out = _ok("report", "--params", "params.yaml", "--ttest", "reports/ttest.json", "--out-dir", "reports")
    return root, out


def test_the_deep_heterogeneous_and_flower_studies_run_on_your_own_data(user_study):
    """Before: study_datasets refused a dataset of your own, `esnfed flower --dataset` took wesad or
    hhar only, and the deep and heterogeneous tables, the heterogeneous and SecAgg+ communication
    rows were built for the papers' datasets: now every study of the pipeline runs on `mine`, each
    table's rows are mine's, and nothing claims a paper's number."""
    root, out = user_study
    tables = root / "reports" / "tables"
    deep = (tables / "deep.md").read_text()
    assert deep.startswith("# deep: Deep vs shallow reservoirs") and "(mine)" in deep.splitlines()[0]
    assert "Missing inputs (n/a cells): none" in deep
    head = next(line for line in deep.splitlines() if line.startswith("| train users"))
    assert "paper" not in head and "deep-incfed" in head
    rows = [line for line in deep.splitlines() if line.startswith(("| 25%", "| 50%", "| 75%", "| 100%"))]
    assert len(rows) == 4 and all("n/a" not in r for r in rows)
    hetero = (tables / "heterogeneous.md").read_text()
    main_rows = [line for line in hetero.split("Spread over clients")[0].splitlines() if line.startswith("| mine")]
    assert main_rows and main_rows[0].startswith("| mine | 100% |") and "n/a" not in main_rows[0]
    assert "budget: unknown" not in hetero and "retrains per cell: 0 " not in hetero  # run line: mine's IncFed
    comm = (tables / "communication-mine.md").read_text()
    for method in ("deep-incfed", "deep-fedip", "local", "ensemble", "align-0.5"):
        assert f"| {method} |" in comm, method
    section = comm.split("## SecAgg+ overhead", 1)[1]
    assert "| mine | incfed | 100% |" in section and "| mine | fedip | 100% |" in section and "Not run" not in section
    assert not (tables / "communication.md").exists()
    assert (root / "reports" / "plots" / "heterogeneous-alpha.csv").read_text().splitlines()[0] == "alpha,mine_100"
    assert (root / "reports" / "figures" / "heterogeneous-alpha.png").is_file()
    doc = json.loads((root / "reports" / "ttest.json").read_text())
    assert doc["missing"] == [] and {c["dataset"] for c in doc["comparisons"]} == {"mine"}
    assert {"deep", "heterogeneous"} <= {c["table"] for c in doc["comparisons"]}
    index = (root / "reports" / "README.md").read_text()
    assert "[communication-mine.md, section \"SecAgg+ overhead\"]" in index
    assert ("heterogeneous-alpha.csv's columns mine_100: drawn once `esnfed dvc-plots --dataset <name> --write` has "
            "declared the dataset's heterogeneous-alpha-<name> plot") in index
    for text in (index, deep, hetero, comm, out):
        for absent in ("wesad", "WESAD", "hhar", "HHAR", "paper' columns"):
            assert absent not in text, absent

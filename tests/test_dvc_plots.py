"""dvc-plots/dvc.yaml's `plots` against the CSVs the report writes: DVC tells the lines of a plot
apart by dash pattern only and has 7 of them (dvc_render's stroke_dash range; an 8th line repeats
the 1st), so no plot may draw more than 7 lines, and each line must be a column of the CSV that the
report writes for the repository's params.yaml (its datasets, their numbers of contexts, the shares,
the study datasets and α of the alignment plot). `esnfed dvc-plots` (esnfed_stages/report/dvc_plots.py)
declares a dataset's plots as that file declares the repository's (each dataset's block there is
exactly the command's output), and those of a dataset of more than 7 contexts in plots of at most
7 lines."""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from esnfed_core.method import Method
from esnfed_core.vocabulary import PCTS, STRATEGIES
from esnfed_stages.report import dvc_plots, figures, hetero_report, report
from esnfed_stages.layout import ALPHA_CSV, DVC_PLOTS_FILE
from esnfed_stages.params.schema import validate
from esnfed_stages.report.report_figures import ACTIVATION_DATASET, SETTINGS, STATIONARY
from esnfed_stages.layout import shares_csv
from esnfed_stages.report.ttest import Inputs
from esnfed_stages.params.load import load_params

ROOT = Path(__file__).resolve().parents[1]
PARAMS = load_params(ROOT / "params.yaml")
DVC_LINES = 7  # dvc_render.vega.OPTIONAL_ANCHOR_RANGES["stroke_dash"]


def _contexts(ds: str, params: dict = PARAMS) -> int:
    """The number of contexts params.yaml gives ``ds``: WESAD's label runs, HHAR's devices, a user
    dataset's context values."""
    if ds == "wesad":
        return params["preprocess"]["wesad"]["contexts"]
    if ds == "hhar":
        return len(params["preprocess"]["hhar"]["devices"])
    return len(params["imports"][ds]["contexts"])


def with_mine(contexts: int) -> dict:
    """The repository's params.yaml with a continual dataset of your own, `mine`, of ``contexts``
    contexts declared beside the others (as docs/own-data.md "Your own data" says)."""
    p = copy.deepcopy(PARAMS)
    p["imports"]["mine"] = dict(p["imports"]["example"], source="mine.csv", contexts=[f"c{i}" for i in range(contexts)])
    p["imported"]["mine"] = "mine.csv"
    p["datasets"], p["continual_datasets"] = [*p["datasets"], "mine"], [*p["continual_datasets"], "mine"]
    p["partition"]["mine"] = p["partition"]["example"]
    for budget in p["budgets"].values():
        budget["space"]["mine"] = budget["space"]["example"]
    validate(p)
    return p


def _activation(contexts: int) -> dict:
    edges = [-1.0, -0.5, 0.0, 0.5, 1.0]
    return {"edges": edges, "users": ["S4"],
            "density": [[[[0.5] * 4 for _ in range(contexts)] for _ in range(contexts)]] * 2,
            "user_density": [[[[[0.5] * 4 for _ in range(contexts)]] for _ in range(contexts)]] * 2}


def _inputs(params: dict = PARAMS) -> Inputs:
    """Assess documents of every method, share and context of params.yaml's datasets (two retrains)."""
    inputs = Inputs()
    for ds in params["datasets"]:
        n = _contexts(ds, params)
        continual = [f"{prefix}-{s}" for prefix, _ in SETTINGS.values() for s in STRATEGIES] \
            if ds in params["continual_datasets"] else []
        for m in continual + [stationary for _, stationary in SETTINGS.values()]:
            entry = {"stream_accuracy": [[0.8] * n] * 2, "accuracy_matrix": [[[0.7] * n] * n] * 2} \
                if m in continual else {}
            if ds == ACTIVATION_DATASET:
                entry["activation"] = _activation(n)
            inputs.docs[(ds, m)] = {"pcts": {pct: entry for pct in PCTS}}
            inputs.paths[(ds, m)] = Path(f"{ds}-{m}.json")
        for m in {"random", *(m for methods in STATIONARY.values() for m in methods)}:
            for pct in PCTS:
                inputs.scores[(ds, m, pct, "test")] = [0.6, 0.62]
    return inputs


def _report_plots(params: dict) -> dict[str, bytes]:
    """Every plots CSV the report writes for ``params``, by file name."""
    rep = report.Report()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figures, "_png", lambda fig: b"png")  # the CSVs, not the drawing, are under test
        inputs = _inputs(params)
        report.add_figures(rep, inputs, params["datasets"], params["continual_datasets"], {},
                           str(params["report"]["activation_pct"]), str(params["report"]["contexts_pct"]),
                           str(params["report"]["matrix_pct"]))
        het = params["heterogeneity"]
        alphas, shares = het["alphas"], het["pcts"]["default"]
        for ds in params["study_datasets"]:
            for a in alphas:
                for pct in shares:
                    inputs.scores[(ds, Method("align", alpha=a).id, pct, "test")] = [0.6, 0.62]
        _, alpha_csv = hetero_report.alpha_figure_and_plot(inputs, alphas, shares, params["study_datasets"])
        rep.plots["heterogeneous-alpha.csv"] = alpha_csv.encode()
    return rep.plots


def _headers(plots: dict[str, bytes]) -> dict[str, list[str]]:
    return {name: next(csv.reader(io.StringIO(data.decode()))) for name, data in plots.items()}


@pytest.fixture(scope="module")
def report_plots() -> dict[str, bytes]:
    """Every plots CSV the report writes for params.yaml, by file name."""
    return _report_plots(PARAMS)


@pytest.fixture(scope="module")
def written(report_plots) -> dict[str, list[str]]:
    """The header of every plots CSV the report writes, by file name."""
    return _headers(report_plots)


def _project_relative(spec: dict) -> dict:
    """A plot of dvc-plots/dvc.yaml with its CSVs named from the project folder (reports/plots/...),
    as dvc_plots.declared_plots names them."""
    return {**spec, "y": {k.removeprefix("../"): v for k, v in spec["y"].items()}}


def _plots() -> list[tuple[str, dict]]:
    """The repository's plots (dvc-plots/dvc.yaml), their CSVs named from the project folder."""
    plots = yaml.safe_load((ROOT / DVC_PLOTS_FILE).read_text())["plots"]
    return [(plot_id, _project_relative(spec)) for p in plots if isinstance(p, dict) for plot_id, spec in p.items()]


def test_the_pipeline_file_declares_no_plot_and_the_plots_file_no_stage():
    """DVC collects every dvc.yaml: the plots stand in dvc-plots/dvc.yaml alone, and each names its CSV
    from that folder (../reports/plots/), where DVC reads it."""
    pipeline = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    shipped = yaml.safe_load((ROOT / DVC_PLOTS_FILE).read_text())
    assert "plots" not in pipeline and set(shipped) == {"vars", "plots"}
    paths = [y for p in shipped["plots"] if isinstance(p, dict) for spec in p.values() for y in spec["y"]]
    assert paths and all(y.startswith("../reports/plots/") for y in paths)
    assert [p for p in shipped["plots"] if not isinstance(p, dict)] == ["../reports/figures"]


@pytest.mark.parametrize("plot_id, spec", _plots(), ids=[plot_id for plot_id, _ in _plots()])
def test_each_plot_draws_at_most_7_lines_each_a_column_the_report_writes(written, plot_id, spec):
    lines = [(path, column) for path, columns in spec["y"].items() for column in columns]
    assert 0 < len(lines) <= DVC_LINES, (plot_id, lines)
    for path, column in lines:
        name = Path(path).name
        assert Path(path).parent == Path("reports/plots") and name in written, (plot_id, path)
        assert column in written[name] and spec["x"] in written[name], (plot_id, column, written[name])


def test_each_plot_draws_means_and_its_csv_holds_their_stds(written):
    """The plot CSVs held means only while the PNGs draw ± std bands: the stream, accuracy-matrix and
    activation CSVs (as the test-accuracy ones) hold each mean's std over the retrains beside it, so
    the bands can be rebuilt from the data; the plots still draw the means alone."""
    for plot_id, spec in _plots():
        for path, columns in spec["y"].items():
            assert not any(c.endswith("_std") for c in columns), (plot_id, columns)
            name = Path(path).name
            if name.startswith(("stream-", "accuracy-matrix-", "activation-")):
                assert all(f"{c}_std" in written[name] for c in columns), (plot_id, written[name])


def test_the_plots_cover_every_csv_the_report_writes_for_the_repository_params(written):
    drawn = {Path(path).name for _, spec in _plots() for path in spec["y"]}
    assert drawn == set(written)


def _stroke_dash(node):
    """The strokeDash encoding of a vega-lite spec (the first found), None without one."""
    if isinstance(node, dict):
        if isinstance(node.get("strokeDash"), dict):
            return node["strokeDash"]
        node = list(node.values())
    if isinstance(node, list):
        return next((found for v in node if (found := _stroke_dash(v)) is not None), None)
    return None


def _dvc_plots_show(root: Path, dvc_files: dict[str, bytes], params: bytes, plots: dict[str, bytes]) -> dict:
    """`dvc plots show --json` in ``root`` on these dvc.yaml files (by path in ``root``), params.yaml and
    plot CSVs: plot id -> its rendered vega-lite spec."""
    root.mkdir(exist_ok=True)
    for name, data in dvc_files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "params.yaml").write_bytes(params)
    (root / "reports" / "plots").mkdir(parents=True)
    (root / "reports" / "figures").mkdir()
    for name, data in plots.items():
        (root / "reports" / "plots" / name).write_bytes(data)
    dvc = str(Path(sys.executable).parent / "dvc")
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=root, check=True)
    out = subprocess.run([dvc, "plots", "show", "--json"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    shown = shown.get("data", shown)
    return {plot_id: next(item["content"] for item in items if item.get("type") == "vega")
            for plot_id, items in shown.items() if any(item.get("type") == "vega" for item in items)}


def _assert_each_line_has_its_own_dash(shown: dict, plots: list[tuple[str, dict]]) -> None:
    """Every plot of ``plots`` rendered, its lines (the strokeDash domain) as many as it declares,
    each with another dash pattern, params interpolated in its title."""
    assert {plot_id for plot_id, _ in plots} <= set(shown)
    for plot_id, declared in plots:
        spec = shown[plot_id]
        dash = _stroke_dash(spec)
        lines = dash["scale"]["domain"]
        assert len(lines) == len(next(iter(declared["y"].values()))), plot_id
        assert len({tuple(r) for r in dash["scale"]["range"]}) == len(lines), (plot_id, dash["scale"])
        assert "${" not in json.dumps(spec["title"]), spec["title"]


@pytest.mark.dvc
def test_dvc_plots_show_draws_every_line_of_a_plot_with_its_own_dash(tmp_path, report_plots):
    """`dvc plots show` itself, on the repository's dvc.yaml and dvc-plots/dvc.yaml, params.yaml and the
    CSVs above: every declared plot is rendered (params such as ${report.matrix_pct} interpolated in its
    title, read through the plots file's vars), and in each the lines (its strokeDash domain) have as
    many different dash patterns."""
    files = {name: (ROOT / name).read_bytes() for name in ("dvc.yaml", str(DVC_PLOTS_FILE))}
    shown = _dvc_plots_show(tmp_path, files, (ROOT / "params.yaml").read_bytes(), report_plots)
    _assert_each_line_has_its_own_dash(shown, _plots())


# ---------------------------------------------------------------- esnfed dvc-plots (esnfed_stages/report/dvc_plots.py)
def _parsed(text: str) -> list[tuple[str, dict]]:
    """The entries of a `plots` list written as ``text`` (dvc_plots.render's), as (id, definition)."""
    return [next(iter(e.items())) for e in yaml.safe_load("plots:\n" + text)["plots"]]


def _of(ds: str, csv_name: str) -> bool:
    """Whether a plot CSV is one of ``ds``'s per-dataset ones (not the activation or alignment plots)."""
    return csv_name == shares_csv(ds) or csv_name.startswith((f"stream-{ds}-", f"accuracy-matrix-{ds}-"))


def _alpha_columns(ds: str, header: list[str]) -> list[str]:
    """``ds``'s columns of the alignment CSV (<dataset>_<share>)."""
    return [c for c in header if c.rsplit("_", 1)[0] == ds]


@pytest.mark.parametrize("ds", PARAMS["datasets"])
def test_the_command_declares_each_dataset_as_the_repository_plots_file_does(written, ds):
    """`esnfed dvc-plots --dataset wesad` (hhar, example) gives the plots dvc-plots/dvc.yaml ships for
    it: the file's block of the dataset is the command's output, line for line (so the file is
    current), and they draw every CSV of the dataset the report writes and, for a study dataset, its
    columns of the alignment CSV (before, the command left out its heterogeneous-alpha plot)."""
    plots = dvc_plots.declared_plots(PARAMS, ds)
    text = dvc_plots.render(ds, dvc_plots.located(plots, ROOT, ROOT / DVC_PLOTS_FILE))
    begin, end = dvc_plots.markers(ds)
    shipped_text = (ROOT / DVC_PLOTS_FILE).read_text()
    assert begin + shipped_text.split(begin, 1)[1].split(end, 1)[0] + end + "\n" == text
    assert [(i, _project_relative(spec)) for i, spec in _parsed(text)] == [(p.id, dict(p.spec)) for p in plots]
    shipped = [(plot_id, spec) for plot_id, spec in _plots()
               if plot_id == f"heterogeneous-alpha-{ds}" or all(_of(ds, Path(y).name) for y in spec["y"])]
    assert [(i, _project_relative(spec)) for i, spec in _parsed(text)] == shipped
    alpha = [spec["y"][f"reports/plots/{ALPHA_CSV}"] for plot_id, spec in shipped if plot_id.startswith("heterogeneous-")]
    assert {Path(y).name for _, spec in shipped for y in spec["y"]} - {ALPHA_CSV} == {n for n in written if _of(ds, n)}
    study = ds in PARAMS["study_datasets"]
    assert alpha == ([_alpha_columns(ds, written[ALPHA_CSV])] if study else [])
    assert len(shipped) == (15 if ds in PARAMS["continual_datasets"] else 1) + study


def test_a_study_dataset_of_your_own_gets_its_alignment_plot_of_the_columns_the_report_writes():
    """`mine` in study_datasets: the report writes mine_25 and mine_100 (heterogeneity.pcts.default)
    into the alignment CSV, and the command declares heterogeneous-alpha-mine drawing them, as
    dvc-plots/dvc.yaml's heterogeneous-alpha-wesad draws wesad's; out of study_datasets, no such plot."""
    params = with_mine(3)
    assert not [p for p in dvc_plots.declared_plots(params, "mine") if p.id.startswith("heterogeneous-")]
    params["study_datasets"] = [*params["study_datasets"], "mine"]
    validate(params)
    header = _headers(_report_plots(params))[ALPHA_CSV]
    alpha = dvc_plots.declared_plots(params, "mine")[-1]
    assert alpha.id == "heterogeneous-alpha-mine"
    assert alpha.spec["y"] == {f"reports/plots/{ALPHA_CSV}": ["mine_25", "mine_100"]} and alpha.spec["x"] == "alpha"
    assert _alpha_columns("mine", header) == ["mine_25", "mine_100"]
    wesad = dict(_plots())["heterogeneous-alpha-wesad"]
    assert {k: v for k, v in alpha.spec.items() if k not in ("title", "y")} == \
        {k: v for k, v in wesad.items() if k not in ("title", "y")}
    params["budget"] = "paper"  # its shares: every one (heterogeneity.pcts lists the default budget's only)
    assert dvc_plots.declared_plots(params, "mine")[-1].spec["y"][f"reports/plots/{ALPHA_CSV}"] == \
        [f"mine_{p}" for p in PCTS]


@pytest.mark.parametrize("contexts", range(1, 23))
def test_an_accuracy_matrix_of_more_than_7_contexts_is_declared_as_plots_of_at_most_7_of_its_columns(contexts):
    """DVC has 7 dash patterns: the matrix of n contexts (a line per context's test data) is cut into
    ceil(n / 7) plots of the same CSV, of sizes differing by one at most, together drawing each
    column once, in order; up to 7 contexts one plot, named as dvc-plots/dvc.yaml names the repository's."""
    plots = dvc_plots.dataset_plots("mine", True, contexts)
    assert all(0 < len(next(iter(p.spec["y"].values()))) <= DVC_LINES for p in plots)
    assert len({p.id for p in plots}) == len(plots)
    matrices = [p for p in plots if p.id.startswith("accuracy-matrix-")]
    runs = math.ceil(contexts / DVC_LINES)
    assert len(matrices) == 6 * runs
    for method in (f"{a}-{s}" for a in ("fedclip", "clip") for s in STRATEGIES):
        csv_path = f"reports/plots/accuracy-matrix-mine-{method}.csv"
        mine = [p for p in matrices if csv_path in p.spec["y"]]
        columns = [c for p in mine for c in p.spec["y"][csv_path]]
        assert columns == [f"on_context{j}" for j in range(contexts)]
        sizes = [len(p.spec["y"][csv_path]) for p in mine]
        assert len(mine) == runs and max(sizes) - min(sizes) <= 1
        if runs == 1:
            assert mine[0].id == f"accuracy-matrix-mine-{method}"
        else:
            assert mine[0].id == f"accuracy-matrix-mine-{method}-contexts-0-{sizes[0] - 1}"
            assert f"contexts 0 to {sizes[0] - 1}" in mine[0].spec["title"]


@pytest.mark.parametrize("contexts", [9, 15])
def test_the_split_matrix_plots_draw_columns_the_report_writes_for_so_many_contexts(contexts):
    """The report writes one accuracy-matrix CSV per method whatever the contexts (on_context0 ...
    on_context<n-1>); the plots of `mine` of 9 or 15 contexts draw only its columns, and every CSV of
    mine the report writes."""
    params = with_mine(contexts)
    headers = _headers(_report_plots(params))
    plots = dvc_plots.declared_plots(params, "mine")
    assert len(plots) == 8 + 1 + 6 * math.ceil(contexts / DVC_LINES)
    for p in plots:
        for path, columns in p.spec["y"].items():
            assert set(columns) | {p.spec["x"]} <= set(headers[Path(path).name]), p.id
    assert {Path(y).name for p in plots for y in p.spec["y"]} == {n for n in headers if _of("mine", n)}
    matrix = headers["accuracy-matrix-mine-clip-joint.csv"]
    on = [f"on_context{j}" for j in range(contexts)]
    assert matrix == ["context", "context_name", *on, *(f"{c}_std" for c in on)]  # the means, then their stds


@pytest.mark.dvc
def test_dvc_plots_show_draws_the_plots_the_command_declares(tmp_path):
    """`dvc plots show` on what the command writes: the repository's dvc-plots/dvc.yaml with `esnfed
    dvc-plots --dataset mine --write` (9 contexts: each matrix in two plots), the report's CSVs of
    those params, and a project's own dvc.yaml of nothing but the printed plots of the shipped example
    (--dvc-file dvc.yaml: the CSVs named from the project folder): every plot rendered, each line with
    its own dash."""
    from typer.testing import CliRunner

    from esnfed_cli.main import app

    params = with_mine(9)
    plots = _report_plots(params)
    work = tmp_path / "work"
    work.mkdir()
    (work / DVC_PLOTS_FILE).parent.mkdir()
    (work / DVC_PLOTS_FILE).write_bytes((ROOT / DVC_PLOTS_FILE).read_bytes())
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    result = CliRunner().invoke(app, ["dvc-plots", "--dataset", "mine", "--write", "--dvc-file",
                                      str(work / DVC_PLOTS_FILE), "--params", str(work / "params.yaml")])
    assert result.exit_code == 0, result.output
    written_yaml = (work / DVC_PLOTS_FILE).read_bytes()
    declared = [next(iter(e.items())) for e in yaml.safe_load(written_yaml)["plots"] if isinstance(e, dict)]
    assert sum(plot_id.startswith("accuracy-matrix-mine-") for plot_id, _ in declared) == 12
    shown = _dvc_plots_show(tmp_path / "mine", {str(DVC_PLOTS_FILE): written_yaml}, (work / "params.yaml").read_bytes(),
                            plots)
    _assert_each_line_has_its_own_dash(shown, declared)

    example = dvc_plots.render("example", dvc_plots.declared_plots(PARAMS, "example"))
    shown = _dvc_plots_show(tmp_path / "example", {"dvc.yaml": ("plots:\n" + example).encode()},
                            (ROOT / "params.yaml").read_bytes(), {n: d for n, d in plots.items() if _of("example", n)})
    _assert_each_line_has_its_own_dash(shown, _parsed(example))
    assert len(shown) == 15

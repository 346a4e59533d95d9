"""dvc.yaml's top-level `plots` against the CSVs the report writes: DVC tells the lines of a plot
apart by dash pattern only and has 7 of them (dvc_render's stroke_dash range; an 8th line repeats
the 1st), so no plot may draw more than 7 lines, and each line must be a column of the CSV that the
report writes for the repository's params.yaml (its datasets, their numbers of contexts, the shares,
the study datasets and α of the alignment plot)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from esnfed_core.method import Method
from esnfed_core.vocabulary import PCTS, STRATEGIES
from esnfed_stages import figures, hetero_report, report
from esnfed_stages.report_figures import ACTIVATION_DATASET, SETTINGS, STATIONARY
from esnfed_stages.ttest import Inputs

ROOT = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
DVC_LINES = 7  # dvc_render.vega.OPTIONAL_ANCHOR_RANGES["stroke_dash"]


def _contexts(ds: str) -> int:
    """The number of contexts params.yaml gives ``ds``: WESAD's label runs, HHAR's devices, a user
    dataset's context values."""
    if ds == "wesad":
        return PARAMS["preprocess"]["wesad"]["contexts"]
    if ds == "hhar":
        return len(PARAMS["preprocess"]["hhar"]["devices"])
    return len(PARAMS["imports"][ds]["contexts"])


def _activation(contexts: int) -> dict:
    edges = [-1.0, -0.5, 0.0, 0.5, 1.0]
    return {"edges": edges, "users": ["S4"],
            "density": [[[[0.5] * 4 for _ in range(contexts)] for _ in range(contexts)]] * 2,
            "user_density": [[[[[0.5] * 4 for _ in range(contexts)]] for _ in range(contexts)]] * 2}


def _inputs() -> Inputs:
    """Assess documents of every method, share and context of params.yaml's datasets (two retrains)."""
    inputs = Inputs()
    for ds in PARAMS["datasets"]:
        n = _contexts(ds)
        continual = [f"{prefix}-{s}" for prefix, _ in SETTINGS.values() for s in STRATEGIES] \
            if ds in PARAMS["continual_datasets"] else []
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


@pytest.fixture(scope="module")
def report_plots() -> dict[str, bytes]:
    """Every plots CSV the report writes for params.yaml, by file name."""
    rep = report.Report()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figures, "_png", lambda fig: b"png")  # the CSVs, not the drawing, are under test
        inputs = _inputs()
        report.add_figures(rep, inputs, PARAMS["datasets"], PARAMS["continual_datasets"], {},
                           str(PARAMS["report"]["activation_pct"]), str(PARAMS["report"]["contexts_pct"]),
                           str(PARAMS["report"]["matrix_pct"]))
        het = PARAMS["heterogeneity"]
        alphas, shares = het["alphas"], het["pcts"]["default"]
        for ds in PARAMS["study_datasets"]:
            for a in alphas:
                for pct in shares:
                    inputs.scores[(ds, Method("align", alpha=a).id, pct, "test")] = [0.6, 0.62]
        _, alpha_csv = hetero_report.alpha_figure_and_plot(inputs, alphas, shares, PARAMS["study_datasets"])
        rep.plots["heterogeneous-alpha.csv"] = alpha_csv.encode()
    return rep.plots


@pytest.fixture(scope="module")
def written(report_plots) -> dict[str, list[str]]:
    """The header of every plots CSV the report writes, by file name."""
    return {name: next(csv.reader(io.StringIO(data.decode()))) for name, data in report_plots.items()}


def _plots() -> list[tuple[str, dict]]:
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    return [next(iter(p.items())) for p in plots if isinstance(p, dict)]


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


@pytest.mark.dvc
def test_dvc_plots_show_draws_every_line_of_a_plot_with_its_own_dash(tmp_path, report_plots):
    """`dvc plots show` itself, on dvc.yaml, params.yaml and the CSVs above: every declared plot is
    rendered (params such as ${report.matrix_pct} interpolated in its title), and in each the lines
    (its strokeDash domain) have as many different dash patterns."""
    for name in ("dvc.yaml", "params.yaml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    (tmp_path / "reports" / "plots").mkdir(parents=True)
    (tmp_path / "reports" / "figures").mkdir()
    for name, data in report_plots.items():
        (tmp_path / "reports" / "plots" / name).write_bytes(data)
    dvc = str(Path(sys.executable).parent / "dvc")
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    out = subprocess.run([dvc, "plots", "show", "--json"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    shown = shown.get("data", shown)
    ids = [plot_id for plot_id, _ in _plots()]
    assert set(ids) <= set(shown)
    for plot_id in ids:
        spec = next(item["content"] for item in shown[plot_id] if item.get("type") == "vega")
        dash = _stroke_dash(spec)
        lines = dash["scale"]["domain"]
        assert len(lines) == len(next(iter(dict(_plots())[plot_id]["y"].values()))), plot_id
        assert len({tuple(r) for r in dash["scale"]["range"]}) == len(lines), (plot_id, dash["scale"])
        assert "${" not in json.dumps(spec["title"]), spec["title"]
